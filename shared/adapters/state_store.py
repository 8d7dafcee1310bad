"""The state store: orders and their state records in Azure Table Storage.

Keys:
- ``<OrderID> / order``: the order as accepted, written once.
- ``<OrderID> / state``: the state record. Every change is a single-entity write conditional on
  the ETag it was read with, so a lost race surfaces as ConcurrencyConflict, never an overwrite.
- In-flight index (its own table), ``inflight / <OrderID>``: one entity per order that is not yet
  settled. The Supervisor reads this one partition (a key-range query), so a tick costs the same
  however many completed orders the state table holds. The entry is written before the order
  and removed after it settles, so it may name an order that is done (the Supervisor then drops
  it) but never misses one that is not.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableClient, TableTransactionError, UpdateMode

from shared.domain.order import Order
from shared.domain.state import (
    CompensationState,
    OrderState,
    ProcessState,
    StepState,
)

ORDER_ROW = "order"
STATE_ROW = "state"
INFLIGHT_PARTITION = "inflight"


class BadContinuation(ValueError):
    """A continuation token that this store did not hand out."""


def _encode_token(token: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(token).encode()).decode()


def _decode_token(token: str | None) -> Any:
    if not token:
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, UnicodeDecodeError):
        raise BadContinuation("continuation token is not one this API handed out") from None
    if not isinstance(value, dict):
        raise BadContinuation("continuation token is not one this API handed out")
    return value


class ConcurrencyConflict(Exception):
    """Someone else changed the record since we read it."""


class OrderAlreadyExists(Exception):
    def __init__(self, order_id: str, fingerprint: str | None) -> None:
        super().__init__(f"order {order_id} already exists")
        self.fingerprint = fingerprint


@dataclass(frozen=True)
class StoredOrder:
    order: dict[str, Any]
    fingerprint: str
    state: OrderState


@dataclass(frozen=True)
class InFlightEntry:
    order_id: str
    since: datetime


def state_to_entity(state: OrderState) -> dict[str, Any]:
    current = state.current_step
    entity: dict[str, Any] = {
        "PartitionKey": state.order_id,
        "RowKey": STATE_ROW,
        "OrderID": state.order_id,
        "LockedBy": state.locked_by,
        "CompleteBy": state.complete_by,
        "ProcessState": state.process_state.value,
        "FailureCount": state.failure_count,
        "CurrentStep": current.name if current else None,
        "Compensation": state.compensation.value if state.compensation else None,
        "CompensationFailureCount": state.compensation_failure_count,
        "Steps": json.dumps([s.to_dict() for s in state.steps]),
        "ReplyTo": state.reply_to,
        "LastError": state.last_error,
        "FailedStep": state.failed_step,
        "Resubmissions": state.generation,
        "History": json.dumps(state.history) if state.history else None,
        "CreatedAt": state.created_at,
        "UpdatedAt": state.updated_at,
    }
    # Table Storage has no null: an absent property is how a field reads as null.
    return {k: v for k, v in entity.items() if v is not None}


def state_from_entity(e: Any) -> OrderState:
    comp = e.get("Compensation")
    return OrderState(
        order_id=e["OrderID"],
        process_state=ProcessState(e["ProcessState"]),
        steps=[StepState.from_dict(d) for d in json.loads(e["Steps"])],
        created_at=e["CreatedAt"],
        updated_at=e["UpdatedAt"],
        locked_by=e.get("LockedBy"),
        complete_by=e.get("CompleteBy"),
        failure_count=int(e.get("FailureCount", 0)),
        compensation=CompensationState(comp) if comp else None,
        compensation_failure_count=int(e.get("CompensationFailureCount", 0)),
        reply_to=e.get("ReplyTo"),
        last_error=e.get("LastError"),
        failed_step=e.get("FailedStep"),
        generation=int(e.get("Resubmissions", 0)),
        history=json.loads(e["History"]) if e.get("History") else [],
        version=e.metadata["etag"],
    )


class TableOrderStore:
    def __init__(self, states: TableClient, inflight: TableClient) -> None:
        self._states = states
        self._inflight = inflight

    def create(self, order: Order, state: OrderState) -> None:
        """Write the order and its first state in one entity-group transaction: both or neither."""
        self.track(state)
        details = {
            "PartitionKey": order.order_id,
            "RowKey": ORDER_ROW,
            "Document": json.dumps(order.document()),
            "Fingerprint": order.fingerprint(),
            "CustomerId": order.customer_id,
            "Total": str(order.total),
            "ReceivedAt": state.created_at,
        }
        try:
            self._states.submit_transaction(
                [("create", details), ("create", state_to_entity(state))]
            )
        except TableTransactionError as e:
            if e.error_code != "EntityAlreadyExists":
                raise
            existing = self._get(order.order_id, ORDER_ROW)
            raise OrderAlreadyExists(
                order.order_id, existing.get("Fingerprint") if existing else None
            ) from None

    def load(self, order_id: str) -> StoredOrder | None:
        """The order and its state in one request (a single-partition query)."""
        rows = {
            e["RowKey"]: e
            for e in self._states.query_entities(
                "PartitionKey eq @pk", parameters={"pk": order_id}
            )
        }
        if STATE_ROW not in rows or ORDER_ROW not in rows:
            return None
        details = rows[ORDER_ROW]
        return StoredOrder(
            order=json.loads(details["Document"]),
            fingerprint=details["Fingerprint"],
            state=state_from_entity(rows[STATE_ROW]),
        )

    def get_state(self, order_id: str) -> OrderState | None:
        e = self._get(order_id, STATE_ROW)
        return state_from_entity(e) if e is not None else None

    def save(self, state: OrderState) -> OrderState:
        """Replace the state record if nobody changed it since it was read."""
        if state.version is None:
            raise ValueError("save() needs a state read from the store")
        try:
            meta = self._states.update_entity(
                state_to_entity(state), mode=UpdateMode.REPLACE,
                etag=state.version, match_condition=MatchConditions.IfNotModified,
            )
        except (ResourceModifiedError, ResourceNotFoundError) as e:
            raise ConcurrencyConflict(f"order {state.order_id}: {e.reason}") from None
        state.version = meta["etag"]
        return state

    def list_states(self, process_state: str | None, limit: int,
                    continuation: str | None) -> tuple[list[OrderState], str | None]:
        """One page of state records, optionally of one ProcessState.

        An operator's query: it filters on properties, so Table Storage reads the whole table
        for it. The Scheduler and the Supervisor never call it.
        """
        query = "RowKey eq @rk" + (" and ProcessState eq @ps" if process_state else "")
        params = {"rk": STATE_ROW, "ps": process_state or ""}
        pages = self._states.query_entities(query, parameters=params,
                                            results_per_page=limit).by_page(
            continuation_token=_decode_token(continuation))
        page = next(pages, [])
        items = [state_from_entity(e) for e in page]
        token = pages.continuation_token  # type: ignore[attr-defined]
        return items, _encode_token(token) if token else None

    def track(self, state: OrderState) -> None:
        """Put an order (back) into the in-flight index, before it is handed on."""
        self._inflight.upsert_entity(
            {"PartitionKey": INFLIGHT_PARTITION, "RowKey": state.order_id,
             "Since": state.updated_at},
            mode=UpdateMode.REPLACE,
        )

    def in_flight(self) -> Iterator[InFlightEntry]:
        for e in self._inflight.query_entities(
            "PartitionKey eq @pk", parameters={"pk": INFLIGHT_PARTITION}, select=["RowKey", "Since"]
        ):
            yield InFlightEntry(e["RowKey"], e["Since"])

    def forget(self, order_id: str) -> None:
        """Drop a settled order from the in-flight index (idempotent)."""
        self._inflight.delete_entity(INFLIGHT_PARTITION, order_id)

    def _get(self, pk: str, rk: str) -> Any:
        try:
            return self._states.get_entity(pk, rk)
        except ResourceNotFoundError:
            return None
