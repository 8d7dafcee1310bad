"""An order's events to the outside: status to the submitter, alerts to operators."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from shared.adapters.alerts import COMPENSATION_FAILED, ORDER_FAILED, AlertSink, OperatorAlert
from shared.adapters.queues import MessageSender
from shared.domain.messages import StatusUpdate
from shared.domain.state import Event

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, sender: MessageSender, alerts: AlertSink) -> None:
        self._sender = sender
        self._alerts = alerts

    def publish(self, order_id: str, reply_to: str | None, events: Iterable[Event],
                at: datetime) -> None:
        for e in events:
            if e.is_alert:
                kind = ORDER_FAILED if e.kind == "failed" else COMPENSATION_FAILED
                self._alerts.raise_alert(
                    OperatorAlert(kind, order_id, e.detail or e.kind, at, e.step)
                )
            if reply_to:
                self.status(reply_to, StatusUpdate(
                    order_id=order_id, event=e.kind, at=at, step=e.step, detail=e.detail))

    def status(self, reply_to: str, update: StatusUpdate) -> None:
        # Status is a courtesy to the submitter: a missing or full reply queue must not stop
        # the order, so failures are logged, not raised. The state store is the record.
        try:
            self._sender.send(reply_to, update.to_json())
        except Exception as e:
            log.warning("status %s for %s to %s not sent: %s", update.event, update.order_id,
                        reply_to, e)
