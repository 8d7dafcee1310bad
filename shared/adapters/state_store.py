"""The state store: orders and their state records in Azure Table Storage, and the due-time index.

An order is two rows of its own partition: ``order``, the order as accepted (written once), and
``state``, the state record, changed only by writes conditional on the ETag it was read with.
Every write keeps the due-time index true (shared/domain/due_index.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, cast

from azure.core import MatchConditions
from azure.core.exceptions import (
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.core.paging import PageIterator
from azure.data.tables import TableClient, TableTransactionError, UpdateMode

from shared.adapters.paging import decode_token, encode_token
from shared.adapters.state_entity import (
    STATE_ROW,
    CorruptRecord,
    state_from_entity,
    state_to_entity,
)
from shared.domain import due_index
from shared.domain.due_index import IndexKey
from shared.domain.effects import outbox_to_json
from shared.domain.state import (
    OrderState,
    schema_of,
)
from shared.domain.workflow_message import WorkflowMessage

log = logging.getLogger(__name__)

ORDER_ROW = "order"
# How many pages of the table a search by an order column reads at most.
SEARCH_PAGES = 10


class ConcurrencyConflict(Exception):
    """Someone else changed the record since we read it: a lost race, never an overwrite."""


class OrderNotStorable(Exception):
    """Storage refused the order for what it holds (a value or the entity past a size limit),
    not for being down: the same write fails every time, so it is recorded, not retried."""

    def __init__(self, order_id: str, reason: str) -> None:
        super().__init__(f"order {order_id} cannot be stored: {reason}")
        self.order_id = order_id
        self.reason = reason


# Table Storage's answers to a write it will never accept as it stands.
NOT_STORABLE_CODES = frozenset({
    "PropertyValueTooLarge", "EntityTooLarge", "RequestBodyTooLarge", "PropertyNameTooLong",
    "TooManyProperties", "InvalidInput", "InvalidValueType", "OutOfRangeInput",
})


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
    """An entry of the due-time index, as the Supervisor meets it."""

    key: str  # exact: what the record names and what dropping it deletes
    order_id: str  # "" when the entry names none (an entry no release could have written)
    generation: int | None  # None: the first releases' entries, for whichever generation
    since: datetime  # when it was written
    # The record's version the entry was put in against ("" before the order's first record,
    # None for an entry from before the index): once the record is at another version, no
    # write can name this entry any more.
    base: str | None = None
    # The version of a record the Supervisor found unreadable and reported; skipped until it
    # changes.
    unreadable: str | None = None
    # The pause its order waits for (OrderState.held), when it was filed for one: once that
    # pause ends, the Supervisor finds it before its time (OrderStore.held).
    held: str | None = None


class OrderStore(Protocol):
    """What the handlers need of the state store. TableOrderStore is the real one; the tests'
    in-memory one passes the same contract test (tests/integration/test_store_contract.py).

    ``create`` and ``save`` keep the due-time index (due_index.py): no caller files an entry.
    """

    def create(self, order: WorkflowMessage, state: OrderState) -> OrderState: ...
    def load(self, order_id: str) -> StoredOrder | None: ...
    def get_state(self, order_id: str) -> OrderState | None: ...
    def save(self, state: OrderState, *, move: bool = False) -> OrderState: ...
    def confirm_outbox(self, state: OrderState) -> OrderState: ...
    def due(self, now: datetime, limit: int) -> list[InFlightEntry]: ...
    def held(self, target: str, after: datetime, limit: int) -> list[InFlightEntry]: ...
    def drop(self, key: str) -> None: ...
    def quarantine(self, entry: InFlightEntry, version: str, until: datetime) -> None: ...
    def list_states(self, process_state: str | None, limit: int,
                    continuation: str | None, prefix: str | None = None,
                    ) -> tuple[list[OrderState], str | None]: ...
    def order_ids_where(self, column: str, value: str,
                        limit: int) -> tuple[list[str], bool]: ...


# Pages of one partition a look for held entries follows (OrderStore.held): each is up to
# 1,000 entries read, the held ones among them kept.
HELD_PAGES = 5


# A time for an index entry that carries none (the first releases wrote only the key): old
# enough that whatever can follow it has.
_LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


def entry_from_index(e: Any) -> InFlightEntry:
    """An index entry as the Supervisor meets it, from any release's shape (due_index.names).
    One that names no order reads with an empty order id: the Supervisor drops it."""
    key = IndexKey(str(e["PartitionKey"]), str(e["RowKey"]))
    named = key.names()
    order_id, generation = named if named is not None else ("", None)
    if e.get("OrderID") is not None:
        order_id = str(e["OrderID"])
    if e.get("Generation") is not None:
        with contextlib.suppress(TypeError, ValueError):
            generation = int(e["Generation"])
    since = e.get("Since")
    return InFlightEntry(str(key), order_id, generation,
                         since if isinstance(since, datetime) else _LONG_AGO,
                         e.get("Base"), e.get("Unreadable"), e.get("Held"))


class TableOrderStore:
    def __init__(self, states: TableClient, inflight: TableClient, pending_grace: timedelta,
                 horizon: timedelta | None = None) -> None:
        self._states = states
        self._inflight = inflight
        self._grace = pending_grace
        self._horizon = horizon if horizon is not None else pending_grace  # see due_index

    def create(self, order: WorkflowMessage, state: OrderState) -> OrderState:
        """Write the order and its first state in one entity-group transaction: both or neither.

        The order's index entry goes in first, so that no order exists the Supervisor cannot find
        (and comes out again when the order was there).
        Returns the state as stored (with its version and index entry); ``state`` is left as
        it was, so a caller whose write failed holds nothing the store did not record.
        """
        key, added = self._file(state, base="", exact=False)
        state = dataclasses.replace(state, index_key=key)
        details = {
            "PartitionKey": state.order_id,  # a declared sender's order: under its record id
            "RowKey": ORDER_ROW,
            # Not ASCII-escaped: a "\uXXXX" escape is six characters of the 32K a string may hold.
            "Document": json.dumps(order.document(), ensure_ascii=False),
            "Fingerprint": order.fingerprint(),
            **order.columns(),
            "ReceivedAt": state.created_at,
        }
        try:
            results = self._states.submit_transaction(
                [("create", details), ("create", state_to_entity(state))]
            )
        except TableTransactionError as e:
            code = str(getattr(e, "error_code", ""))
            if code in NOT_STORABLE_CODES:
                if added:
                    self.drop(key)
                raise OrderNotStorable(state.order_id, code) from None
            if code != "EntityAlreadyExists":
                raise  # the entry stays: the Supervisor drops it once nothing can follow it
            if added:  # not the order's: the one there already names its own
                self.drop(key)
            existing = self._get(state.order_id, ORDER_ROW)
            raise OrderAlreadyExists(
                state.order_id, existing.get("Fingerprint") if existing else None
            ) from None
        state.version, state.schema_version = results[1]["etag"], schema_of(state)
        return state

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

    def save(self, state: OrderState, *, move: bool = False) -> OrderState:
        """Replace the state record if nobody changed it since it was read.

        Files the order anew in the due-time index first when the write makes it due earlier
        than its entry (or it has none), or when ``move``: the Supervisor moving an entry it
        met at its time. The superseded entry is dropped after the write. Returns the state as
        stored; ``state`` is left as it was (see create).
        """
        if state.version is None:
            raise ValueError("save() needs a state read from the store")
        old = key = state.index_key
        if due_index.write_needs_new_key(state, self._grace, move=move):
            key, _ = self._file(state, base=state.version, exact=move)
        state = dataclasses.replace(state, index_key=key)  # the caller's stays as it was
        try:
            meta = self._states.update_entity(
                state_to_entity(state), mode=UpdateMode.REPLACE,
                etag=state.version, match_condition=MatchConditions.IfNotModified,
            )
        except (ResourceModifiedError, ResourceNotFoundError) as e:
            # A new entry stays behind, named by nothing: the Supervisor drops it at its time.
            raise ConcurrencyConflict(f"order {state.order_id}: {e.reason}") from None
        state.version, state.schema_version = meta["etag"], schema_of(state)
        if old is not None and old != state.index_key:
            self.drop(old)
        return state

    def confirm_outbox(self, state: OrderState) -> OrderState:
        """Record that the outbox of this version was carried out (a small conditional merge).

        Raises ConcurrencyConflict when the record moved on: the newer transition has its own
        outbox, and the old one needs no confirming.
        """
        confirmed = state.confirmed()
        try:
            meta = self._states.update_entity(
                {"PartitionKey": state.order_id, "RowKey": STATE_ROW,
                 "Outbox": outbox_to_json([]),
                 "Steps": state_to_entity(confirmed)["Steps"]},
                mode=UpdateMode.MERGE, etag=state.version,
                match_condition=MatchConditions.IfNotModified,
            )
        except (ResourceModifiedError, ResourceNotFoundError) as e:
            raise ConcurrencyConflict(f"order {state.order_id}: {e.reason}") from None
        confirmed.version = meta["etag"]
        return confirmed

    def list_states(self, process_state: str | None, limit: int,
                    continuation: str | None, prefix: str | None = None,
                    ) -> tuple[list[OrderState], str | None]:
        """One page of state records, optionally of one ProcessState, optionally of the orders
        whose id starts with ``prefix``.

        An operator's query: it filters on properties, so Table Storage reads the whole table
        for it. The Scheduler and the Supervisor never call it.
        """
        query = "RowKey eq @rk" + (" and ProcessState eq @ps" if process_state else "")
        params = {"rk": STATE_ROW, "ps": process_state or ""}
        if prefix:  # ids starting with it: a range of partitions, not a scan
            query += " and PartitionKey ge @lo and PartitionKey lt @hi"
            params |= {"lo": prefix, "hi": prefix[:-1] + chr(ord(prefix[-1]) + 1)}
        pages = self._states.query_entities(query, parameters=params,
                                            results_per_page=limit).by_page(
            continuation_token=decode_token(continuation))
        page: Any = next(pages, [])
        items = []
        for e in page:
            try:
                items.append(state_from_entity(e))
            except CorruptRecord as err:  # the Supervisor reports it; a listing goes on
                log.warning("%s", err)
        token = pages.continuation_token  # type: ignore[attr-defined]
        return items, encode_token(token) if token else None

    def order_ids_where(self, column: str, value: str,
                        limit: int) -> tuple[list[str], bool]:
        """The ids of at most ``limit`` orders whose stored order row has ``column`` equal to
        ``value`` (a column the workflow's message model writes, WorkflowMessage.columns), and
        whether they are all there are (False: more match, or the scan stopped first).

        An operator's query, and a scan: it reads at most SEARCH_PAGES pages of the table
        (the service hands back a page, perhaps empty, every 1,000 rows or 5 s it reads).
        """
        if not column.isidentifier():  # a name from the code, never from a request
            raise ValueError(f"{column!r} is not a column name")
        # One more than asked for: whether it comes says whether there are more.
        pages = self._states.query_entities(
            f"RowKey eq @rk and {column} eq @v", parameters={"rk": ORDER_ROW, "v": value},
            results_per_page=limit + 1, select=["PartitionKey"]).by_page()
        found: list[str] = []
        for page in itertools.islice(pages, SEARCH_PAGES):
            found += [str(e["PartitionKey"]) for e in page]
            if len(found) > limit:
                return found[:limit], False
        # by_page() is typed as a plain iterator; it is a PageIterator, which keeps the token.
        return found, cast(PageIterator[Any], pages).continuation_token is None

    def _file(self, state: OrderState, base: str, *, exact: bool) -> tuple[str, bool]:
        """Put an index entry for the state (due_index.file_at); its key, and whether this call
        added it."""
        key = due_index.key_to_file(state, self._grace, self._horizon, exact=exact)
        try:
            entity = {"PartitionKey": key.partition, "RowKey": key.row,
                      "OrderID": state.order_id, "Generation": state.generation,
                      "Since": state.updated_at, "Base": base, "Held": state.held}
            self._inflight.create_entity({k: v for k, v in entity.items() if v is not None})
        except ResourceExistsError:
            return str(key), False
        return str(key), True

    def due(self, now: datetime, limit: int) -> list[InFlightEntry]:
        """The entries whose time has come, at most ``limit`` from each partition (one request
        each), and the entries from before the index."""
        upto = due_index.due_by(now)
        found: list[InFlightEntry] = []
        for partition in [*due_index.partitions(), due_index.LEGACY_PARTITION]:
            query, params = "PartitionKey eq @pk", {"pk": partition}
            if partition != due_index.LEGACY_PARTITION:
                query, params = query + " and RowKey le @upto", {**params, "upto": upto}
            pages = self._inflight.query_entities(
                query, parameters=params, results_per_page=limit,
                select=["PartitionKey", "RowKey", "OrderID", "Generation", "Since", "Base",
                        "Unreadable", "Held"]).by_page()
            found.extend(entry_from_index(e) for e in next(pages, []))
        return found

    def held(self, target: str, after: datetime, limit: int) -> list[InFlightEntry]:
        """The entries filed after ``after`` for orders held by the pause ``target``
        (pauses.Target.key), the earliest first, at most ``limit`` from each partition: what
        waited for a pause that has ended, found before its time. A filter on a property: the
        service may hand back a page short of it (or empty) every 1,000 rows it reads, so the
        pages are followed, at most HELD_PAGES of them."""
        found: list[InFlightEntry] = []
        for partition in due_index.partitions():
            pages = self._inflight.query_entities(
                "PartitionKey eq @pk and RowKey gt @after and Held eq @held",
                parameters={"pk": partition, "after": due_index.due_by(after),
                            "held": target},
                results_per_page=limit,
                select=["PartitionKey", "RowKey", "OrderID", "Generation", "Since", "Base",
                        "Unreadable", "Held"]).by_page()
            mine: list[InFlightEntry] = []
            for page in itertools.islice(pages, HELD_PAGES):
                mine += [entry_from_index(e) for e in page]
                if len(mine) >= limit:
                    break
            found += mine[:limit]
        return found

    def drop(self, key: str) -> None:
        """Drop an index entry by its exact key (idempotent)."""
        k = IndexKey.parse(key)
        self._inflight.delete_entity(k.partition, k.row)

    def quarantine(self, entry: InFlightEntry, version: str, until: datetime) -> None:
        """File this unreadable version of the record out of the way, to be looked at again at
        ``until``: a new entry that remembers the version, then this one dropped. Entries at the
        front of a partition are what a tick reads, so one left there would hold up every order
        filed behind it."""
        key = due_index.key_for(entry.order_id, entry.generation, until)
        props: dict[str, Any] = {"PartitionKey": key.partition, "RowKey": key.row,
                                 "OrderID": entry.order_id, "Since": entry.since,
                                 "Base": version, "Unreadable": version}
        if entry.generation is not None:
            props["Generation"] = entry.generation
        if entry.held is not None:  # filed aside, it is still found when its pause ends
            props["Held"] = entry.held
        self._inflight.upsert_entity(props, mode=UpdateMode.REPLACE)
        if str(key) != entry.key:
            self.drop(entry.key)

    def _get(self, pk: str, rk: str) -> Any:
        try:
            return self._states.get_entity(pk, rk)
        except ResourceNotFoundError:
            return None
