"""What an operator can do: look orders up, list them by state, resubmit a failed one, read
alerts and rejected intake, check health. Used by the HTTP API and the orders CLI alike."""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from azure.data.tables import TableClient
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.adapters.paging import decode_token, encode_token
from shared.adapters.rejections import REJECTED_PARTITION
from shared.adapters.state_store import ConcurrencyConflict, OrderStore
from shared.clock import Clock
from shared.domain.order import ORDER_ID_PATTERN
from shared.domain.state import IllegalTransition, OrderState, ProcessState, resubmit
from shared.handlers.health import HealthProbe
from shared.handlers.relay import EffectRelay

log = logging.getLogger(__name__)

MAX_PAGE = 1000
# A resubmit reason is kept in the order's history: a sentence, not a document.
MAX_REASON = 1000
_ORDER_ID = re.compile(ORDER_ID_PATTERN)


class ResubmitRequest(BaseModel):
    """The body of POST /api/orders/{id}/resubmit (optional as a whole)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str = Field("", max_length=MAX_REASON)
    force: bool = False

    @classmethod
    def from_body(cls, body: bytes) -> ResubmitRequest:
        """The request, or ValueError saying what is wrong with it, in a sentence."""
        if not body.strip():
            return cls()
        try:
            return cls.model_validate_json(body)
        except ValidationError as e:
            raise ValueError(_first_problem(e)) from None


def _first_problem(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"]) or "body"
    if err["type"] == "extra_forbidden":
        return f"{where} is not a field of a resubmit (reason, force)"
    if err["type"] in ("json_invalid", "model_type"):
        return 'body must be a JSON object, e.g. {"reason": "card limit raised"}'
    return f"{where}: {err['msg']}"


def check_order_id(order_id: str) -> None:
    if not _ORDER_ID.match(order_id):
        raise ValueError(f"{order_id[:140]!r} is not an order id (letters, digits and ._:- , "
                         "up to 128 characters, starting with a letter or digit)")


class OrderNotFound(LookupError):
    pass


class ResubmitRefused(Exception):
    pass


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    continuation: str | None


def state_view(s: OrderState) -> dict[str, Any]:
    return {
        "OrderID": s.order_id,
        "ProcessState": s.process_state.value,
        "LockedBy": s.locked_by,
        "CompleteBy": s.complete_by.isoformat() if s.complete_by else None,
        "FailureCount": s.failure_count,
        "Compensation": s.compensation.value if s.compensation else None,
        "CurrentStep": s.current_step.name if s.current_step else None,
        "LastError": s.last_error,
        "FailedStep": s.failed_step,
        "Resubmissions": s.generation,
        "CreatedAt": s.created_at.isoformat(),
        "UpdatedAt": s.updated_at.isoformat(),
        "Rescues": s.rescues,
        "Steps": [st.to_dict() for st in s.steps],
        "History": s.history,
        # What the last transition still has to carry out (empty once known done).
        "Outbox": [e.model_dump(mode="json") for e in s.outbox],
    }


def _entity_view(e: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        v = e.get(f)
        out[f] = v.isoformat() if hasattr(v, "isoformat") else v
    return out


_REJECTED_FIELDS = ("RejectedAt", "Kind", "MessageId", "Reason", "DeliveryCount", "Body")


class Operator:
    def __init__(self, *, store: OrderStore, relay: EffectRelay, alerts: TableClient,
                 rejected: TableClient, health: HealthProbe, pending_grace: timedelta,
                 clock: Clock) -> None:
        self._store = store
        self._relay = relay
        self._alerts = alerts
        self._rejected = rejected
        self._health = health
        self._pending_grace = pending_grace
        self._clock = clock

    def get(self, order_id: str) -> dict[str, Any]:
        check_order_id(order_id)
        stored = self._store.load(order_id)
        if stored is None:
            raise OrderNotFound(order_id)
        return {**state_view(stored.state), "Order": stored.order}

    def list(self, process_state: str | None, limit: int, continuation: str | None) -> Page:
        if process_state is not None:
            ProcessState(process_state)  # ValueError names the bad value
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE}")
        states, token = self._store.list_states(process_state, limit, continuation)
        return Page([state_view(s) for s in states], token)

    def resubmit(self, order_id: str, reason: str = "", force: bool = False) -> dict[str, Any]:
        check_order_id(order_id)
        if len(reason) > MAX_REASON:
            raise ValueError(f"the reason is {len(reason)} characters; at most {MAX_REASON}")
        state = self._store.get_state(order_id)
        if state is None:
            raise OrderNotFound(order_id)
        try:
            t = resubmit(state, self._clock(), self._pending_grace, reason, force)
        except IllegalTransition as e:
            raise ResubmitRefused(str(e)) from None
        # Index first: an order the Supervisor can see is never lost, even if we stop here.
        added = self._store.track(order_id, t.state.generation, self._clock())
        try:
            saved = self._store.save(t.state)
        except ConcurrencyConflict:
            raise ResubmitRefused(f"order {order_id} changed meanwhile; look again") from None
        except Exception:
            if added:  # nothing follows it: take it back rather than leave it to the Supervisor
                with contextlib.suppress(Exception):
                    self._store.forget(order_id, t.state.generation)
            raise
        saved = self._relay.carry_out(saved)
        log.warning("order %s resubmitted%s (%s)", order_id, " with force" if force else "",
                    reason or "no reason given")
        return state_view(saved)

    def alerts(self, limit: int = 50, days: int = 7) -> list[dict[str, Any]]:
        """The newest alerts first (one partition a day, newest row first within it)."""
        out: list[dict[str, Any]] = []
        today = self._clock()
        for back in range(days):
            day = (today - timedelta(days=back)).strftime("%Y%m%d")
            for e in self._alerts.query_entities("PartitionKey eq @d", parameters={"d": day},
                                                 results_per_page=limit):
                out.append(_entity_view(e, ("RaisedAt", "Kind", "OrderID", "Step", "Reason")))
                if len(out) >= limit:
                    return out
        return out

    def rejection(self, message_id: str) -> dict[str, Any] | None:
        """Why intake rejected the message with this id, if it did."""
        for e in self._rejected.query_entities(
                "PartitionKey eq @p and MessageId eq @m",
                parameters={"p": REJECTED_PARTITION, "m": message_id},
                select=["RejectedAt", "Kind", "MessageId", "Reason"]):
            return _entity_view(e, ("RejectedAt", "Kind", "MessageId", "Reason"))
        return None

    def rejected(self, limit: int = 50, continuation: str | None = None) -> Page:
        """One page of rejected intake, newest sent first (the row key counts down)."""
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE}")
        pages = self._rejected.query_entities(
            "PartitionKey eq @p", parameters={"p": REJECTED_PARTITION}, results_per_page=limit,
            select=list(_REJECTED_FIELDS)).by_page(continuation_token=decode_token(continuation))
        rows = [_entity_view(e, _REJECTED_FIELDS) for e in next(pages, [])]
        token = pages.continuation_token  # type: ignore[attr-defined]
        return Page(rows, encode_token(token) if token else None)

    def health(self) -> dict[str, Any]:
        return self._health.run()
