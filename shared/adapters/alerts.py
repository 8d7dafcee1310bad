"""Operator alerts: a structured log event (custom dimensions in Application Insights) and a row
in the alerts table, so an operator can search them and the CLI can list them."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from azure.data.tables import TableClient

log = logging.getLogger("order_pipeline.alerts")

# Alert kinds; an Azure Monitor alert rule matches on the log message prefix and these names.
ORDER_FAILED = "OrderFailed"
COMPENSATION_FAILED = "CompensationFailed"
ORDER_CONFLICT = "OrderConflict"


@dataclass(frozen=True)
class OperatorAlert:
    kind: str
    order_id: str
    reason: str
    at: datetime
    step: str | None = None


class AlertSink(Protocol):
    def raise_alert(self, alert: OperatorAlert) -> None: ...


class TableAlertSink:
    def __init__(self, table: TableClient) -> None:
        self._table = table

    def raise_alert(self, alert: OperatorAlert) -> None:
        log.error(
            "OPERATOR_ALERT %s order=%s step=%s: %s", alert.kind, alert.order_id, alert.step,
            alert.reason,
            extra={"custom_dimensions": {
                "alert": alert.kind, "order_id": alert.order_id, "step": alert.step or "",
                "reason": alert.reason,
            }},
        )
        # Newest first within a day: the row key counts down.
        countdown = 10**13 - int(alert.at.timestamp() * 1000)
        self._table.create_entity({
            "PartitionKey": alert.at.strftime("%Y%m%d"),
            "RowKey": f"{countdown:013d}-{uuid.uuid4().hex[:8]}",
            "Kind": alert.kind,
            "OrderID": alert.order_id,
            "Step": alert.step or "",
            "Reason": alert.reason[:4000],
            "RaisedAt": alert.at,
        })
