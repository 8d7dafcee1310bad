"""What an operator is told: an alert names its kind, the order and the reason."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class AlertKind(StrEnum):
    # An Azure Monitor alert rule matches on these names (infra/app/alerts.bicep).
    ORDER_FAILED = "OrderFailed"
    # A step needs a person (a customer's action): the order waits for an operator.
    ORDER_PARKED = "OrderParked"
    COMPENSATION_FAILED = "CompensationFailed"
    ORDER_CONFLICT = "OrderConflict"
    # A valid order storage refuses for what it holds: recorded with its body, never run.
    ORDER_NOT_STORABLE = "OrderNotStorable"
    RECORD_UNREADABLE = "RecordUnreadable"
    # The Supervisor could not act on an order several ticks running.
    SUPERVISION_FAILING = "SupervisionFailing"
    # An Agent was handed a request the app never sent (shared/domain/provenance.py).
    REQUEST_REFUSED = "RequestRefused"


# Raised by what anyone who can send may send (a made-up request or reply, a conflicting body),
# each distinct one an alert of its own: kept as one row per kind and source a day, with a
# count and the latest example, so that a flood of them cannot hide an order's alerts. Only
# an alert that names its source is (rolled_up).
ROLLED_UP = frozenset({AlertKind.REQUEST_REFUSED, AlertKind.ORDER_CONFLICT})



@dataclass(frozen=True)
class OperatorAlert:
    kind: AlertKind
    order_id: str
    reason: str
    at: datetime
    step: str | None = None
    # The same alert raised twice (a retried message, a crash and a replay) has the same key, so
    # the operator sees it once.
    key: str = ""
    # What refused it (an Agent, the Scheduler, intake): a rolled-up alert's row is per source.
    source: str = ""


def rolled_up(alert: OperatorAlert) -> bool:
    return alert.kind in ROLLED_UP and bool(alert.source)
