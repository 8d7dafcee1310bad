"""Operator alerts: a structured log event and a row in the alerts table, so an operator can
search them and the CLI can list them. Raising the same alert (same key) twice adds no row."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from typing import Protocol

from azure.core.exceptions import ResourceExistsError
from azure.data.tables import TableClient

from shared.domain.alerts import OperatorAlert

log = logging.getLogger("order_pipeline.alerts")


class AlertSink(Protocol):
    def raise_alert(self, alert: OperatorAlert) -> None:
        """Record the alert once per key; raise when it could not be recorded."""
        ...


def alert_row_key(alert: OperatorAlert) -> str:
    # Newest first within a day: the row key counts down; the key's hash makes a replay collide.
    countdown = 10**13 - int(alert.at.timestamp() * 1000)
    digest = hashlib.sha256((alert.key or repr(alert)).encode()).hexdigest()[:12]
    return f"{countdown:013d}-{digest}"


class TableAlertSink:
    def __init__(self, table: TableClient) -> None:
        self._table = table

    def raise_alert(self, alert: OperatorAlert) -> None:
        # The log event goes first: at least once is what an alert rule needs (a replay may log
        # it twice, with the same key); the row is written once.
        log.error(
            "OPERATOR_ALERT %s order=%s step=%s: %s", alert.kind.value, alert.order_id,
            alert.step, alert.reason,
            # Flat keys: the OpenTelemetry log exporter turns each into a customDimensions
            # entry (a nested dict would arrive as one string).
            extra={"alert": alert.kind.value, "order_id": alert.order_id,
                   "step": alert.step or "", "reason": alert.reason,
                   "alert_key": alert.key or ""},
        )
        # Raised before (a replay) when the row exists: the operator already has it.
        with contextlib.suppress(ResourceExistsError):
            self._table.create_entity({
                "PartitionKey": alert.at.strftime("%Y%m%d"),
                "RowKey": alert_row_key(alert),
                "Kind": alert.kind.value,
                "OrderID": alert.order_id,
                "Step": alert.step or "",
                "Reason": alert.reason[:4000],
                "RaisedAt": alert.at,
                "AlertKey": alert.key,
            })
