"""In-memory adapters behind the same interfaces as the real ones, for the service layer's tests.

Each takes a ``fault`` hook, called with the operation's name before the operation runs, so a
test can make the process die (raise ``Crash``) or the store fail (raise ``StorageDown``) at any
point between two writes or sends. ``tests/integration/test_store_contract.py`` holds the fake
store and the Azurite one to the same behaviour.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from shared.adapters import alerts as alerts_adapter
from shared.adapters.alerts import (
    AckRefused,
    AlertNotFound,
    AlertScan,
    StoredAlert,
    alert_partition,
    alert_row_key,
    days_back,
)
from shared.adapters.rejections import (
    Rejection,
    StoredRejection,
    kept,
    rejection_row_key,
)
from shared.adapters.state_entity import CorruptRecord, NewerRecord, state_to_entity
from shared.adapters.state_store import (
    ConcurrencyConflict,
    InFlightEntry,
    OrderAlreadyExists,
    OrderNotStorable,
    StoredOrder,
)
from shared.domain import budget, due_index
from shared.domain.alerts import OperatorAlert, rolled_up
from shared.domain.due_index import IndexKey
from shared.domain.limits import LimitState
from shared.domain.messages import Action
from shared.domain.outages import TickLog
from shared.domain.pauses import Pause, Pauses, Target
from shared.domain.redrive import Redrive
from shared.domain.services import Call
from shared.domain.state import SCHEMA_VERSION, OrderState, schema_of
from shared.domain.workflow_message import WorkflowMessage

Fault = Callable[[str], None]


def no_fault(_: str) -> None:
    return None


class Crash(BaseException):
    """The process died here. BaseException, so no handler's ``except Exception`` catches it."""


class StorageDown(Exception):
    """The store or the queue service did not answer."""


class FakeTickLog:
    """The Supervisor's tick record, in memory, versioned like the table entity."""

    def __init__(self, fault: Fault = no_fault) -> None:
        self.fault = fault
        self.log = TickLog()
        self.version: str | None = None
        self._versions = itertools.count(1)

    def read(self) -> tuple[TickLog, str | None]:
        self.fault("ticks.read")
        return self.log, self.version

    def write(self, log: TickLog, version: str | None) -> None:
        self.fault("ticks.write")
        if version != self.version:
            raise ConcurrencyConflict(f"tick log is at {self.version}, not {version}")
        self.log, self.version = log, f"t{next(self._versions)}"


class FakeLimits:
    """The services' limit records, in memory, versioned like the table entities
    (TableLimits)."""

    def __init__(self, fault: Fault = no_fault) -> None:
        self.fault = fault
        self.records: dict[str, tuple[LimitState, str]] = {}
        self._versions = itertools.count(1)
        self.reads = self.writes = 0

    def read(self, service: str) -> tuple[LimitState, str | None]:
        self.fault("limits.read")
        self.reads += 1
        if service not in self.records:
            return LimitState(), None
        return self.records[service]

    def write(self, service: str, state: LimitState, version: str | None) -> str:
        self.fault("limits.write")
        self.writes += 1
        if version != self.records.get(service, (None, None))[1]:
            raise ConcurrencyConflict(f"the {service} limit moved on")
        written = f"l{next(self._versions)}"
        self.records[service] = (state, written)
        return written


class FakeRedrives:
    """The re-drive records, in memory, versioned like the table entities (TableRedrives)."""

    def __init__(self, fault: Fault = no_fault) -> None:
        self.fault = fault
        self.records: dict[str, tuple[Redrive, str]] = {}
        self._versions = itertools.count(1)

    def read(self, redrive_id: str) -> tuple[Redrive | None, str | None]:
        self.fault("redrives.read")
        if redrive_id not in self.records:
            return None, None
        return self.records[redrive_id]

    def write(self, redrive: Redrive, version: str | None) -> str:
        self.fault("redrives.write")
        if version != self.records.get(redrive.id, (None, None))[1]:
            raise ConcurrencyConflict(f"re-drive {redrive.id} moved on")
        written = f"r{next(self._versions)}"
        self.records[redrive.id] = (redrive, written)
        return written

    def listed(self, limit: int, active_only: bool = False) -> list[tuple[Redrive, str]]:
        self.fault("redrives.read")
        return [self.records[k] for k in sorted(self.records)
                if not active_only or self.records[k][0].active][:limit]


class FakePauses:
    """The pause records, in memory, versioned like the table entities (TablePauses)."""

    def __init__(self, fault: Fault = no_fault) -> None:
        self.fault = fault
        self.records: dict[Target, tuple[Pause, str]] = {}
        self._versions = itertools.count(1)

    def read_all(self) -> Pauses:
        self.fault("pauses.read")
        return Pauses({t: p for t, (p, _) in self.records.items()})

    def read(self, target: Target) -> tuple[Pause, str | None]:
        self.fault("pauses.read")
        pause, version = self.records.get(target, (Pause(target), None))
        return pause, version

    def write(self, pause: Pause, version: str | None) -> None:
        self.fault("pauses.write")
        if version != self.records.get(pause.target, (None, None))[1]:
            raise ConcurrencyConflict(f"{pause.target} moved on")
        self.records[pause.target] = (pause, f"p{next(self._versions)}")

    def current(self) -> Pauses:
        """As CachedPauses with no cache: every instance sees a pause at once."""
        return self.read_all()


class FakeOrderStore:
    """Orders, state records and the due-time index, in dicts; versions are a counter."""

    def __init__(self, fault: Fault = no_fault,
                 pending_grace: timedelta = timedelta(seconds=30),
                 horizon: timedelta | None = None) -> None:
        self.fault = fault
        self.orders: dict[str, tuple[dict[str, Any], str]] = {}
        self.columns: dict[str, dict[str, str]] = {}  # the order row's, as the model names
        self.states: dict[str, OrderState] = {}
        self.corrupt: dict[str, str] = {}  # order id -> why its record cannot be read
        self.index: dict[str, InFlightEntry] = {}  # by key
        self.grace = pending_grace
        self.horizon = horizon if horizon is not None else pending_grace
        self._versions = itertools.count(1)

    def _stamp(self, state: OrderState) -> OrderState:
        # Stricter than Table Storage, which would refuse the write (PropertyValueTooLarge) and
        # so stall the order: a record past a property's limit is a defect a test must see.
        for name, value in state_to_entity(state).items():
            if isinstance(value, str) and budget.utf16_units(value) > budget.STRING_PROPERTY:
                raise AssertionError(f"Table Storage would refuse {state.order_id}'s record: "
                                     f"{name} is {budget.utf16_units(value):,} units")
        stored = copy.deepcopy(state)
        stored.version = f"v{next(self._versions)}"
        stored.schema_version = schema_of(state)  # what this release writes, as the table store
        self.states[state.order_id] = stored
        return copy.deepcopy(stored)

    def _read(self, order_id: str) -> OrderState | None:
        if order_id in self.corrupt:
            reason = self.corrupt[order_id]
            if reason.startswith("newer:"):  # as the table store reads a newer release's record
                raise NewerRecord(order_id, self.states[order_id].version or "",
                                  SCHEMA_VERSION + 1, reason)
            raise CorruptRecord(order_id, self.states[order_id].version or "", reason)
        s = self.states.get(order_id)
        return copy.deepcopy(s) if s is not None else None

    def _file(self, state: OrderState, base: str, *, exact: bool) -> tuple[str, bool]:
        self.fault("store.file")
        key = str(due_index.key_to_file(state, self.grace, self.horizon, exact=exact))
        if key in self.index:
            return key, False
        self.index[key] = InFlightEntry(key, state.order_id, state.generation, state.updated_at,
                                        base, held=state.held)
        return key, True

    def create(self, order: WorkflowMessage, state: OrderState) -> OrderState:
        key, added = self._file(state, base="", exact=False)
        state = dataclasses.replace(state, index_key=key)
        self.fault("store.create")
        if budget.json_units(order.document()) > budget.STRING_PROPERTY:
            if added:
                self.drop(key)
            raise OrderNotStorable(state.order_id, "PropertyValueTooLarge")
        if state.order_id in self.states or state.order_id in self.orders:
            if added:
                self.drop(key)
            raise OrderAlreadyExists(state.order_id, self.orders[state.order_id][1]
                                     if state.order_id in self.orders else None)
        self.orders[state.order_id] = (order.document(), order.fingerprint())
        self.columns[state.order_id] = order.columns()
        return self._stamp(state)

    def load(self, order_id: str) -> StoredOrder | None:
        self.fault("store.load")
        state = self._read(order_id)
        if state is None or order_id not in self.orders:
            return None
        doc, fingerprint = self.orders[order_id]
        return StoredOrder(order=copy.deepcopy(doc), fingerprint=fingerprint, state=state)

    def get_state(self, order_id: str) -> OrderState | None:
        self.fault("store.get_state")
        return self._read(order_id)

    def save(self, state: OrderState, *, move: bool = False) -> OrderState:
        if state.version is None:
            raise ValueError("save() needs a state read from the store")
        old = state.index_key
        if due_index.write_needs_new_key(state, self.grace, move=move):
            key, _ = self._file(state, base=state.version, exact=move)
            state = dataclasses.replace(state, index_key=key)
        self.fault("store.save")
        current = self.states.get(state.order_id)
        if current is None or current.version != state.version:
            raise ConcurrencyConflict(f"order {state.order_id}: version {state.version}")
        self.corrupt.pop(state.order_id, None)
        saved = self._stamp(state)
        if old is not None and old != state.index_key:
            self.drop(old)
        return saved

    def confirm_outbox(self, state: OrderState) -> OrderState:
        self.fault("store.confirm_outbox")
        current = self.states.get(state.order_id)
        if current is None or current.version != state.version:
            raise ConcurrencyConflict(f"order {state.order_id}: version {state.version}")
        return self._stamp(current.confirmed())

    def due(self, now: datetime, limit: int) -> list[InFlightEntry]:
        self.fault("store.due")
        upto = due_index.due_by(now)
        by_partition: dict[str, list[tuple[str, InFlightEntry]]] = {}
        for key, entry in self.index.items():
            k = IndexKey.parse(key)
            if k.partition == due_index.LEGACY_PARTITION or k.row <= upto:
                by_partition.setdefault(k.partition, []).append((k.row, entry))
        return [e for rows in by_partition.values() for _, e in sorted(rows)[:limit]]

    def held(self, target: str, after: datetime, limit: int) -> list[InFlightEntry]:
        self.fault("store.held")
        since = due_index.due_by(after)
        by_partition: dict[str, list[tuple[str, InFlightEntry]]] = {}
        for key, entry in self.index.items():
            k = IndexKey.parse(key)
            if (k.partition != due_index.LEGACY_PARTITION and since < k.row
                    and entry.held == target):
                by_partition.setdefault(k.partition, []).append((k.row, entry))
        return [e for rows in by_partition.values() for _, e in sorted(rows)[:limit]]

    def drop(self, key: str) -> None:
        self.fault("store.drop")
        self.index.pop(key, None)

    def quarantine(self, entry: InFlightEntry, version: str, until: datetime) -> None:
        self.fault("store.quarantine")
        key = str(due_index.key_for(entry.order_id, entry.generation, until))
        self.index[key] = replace(entry, key=key, base=version, unreadable=version)
        if key != entry.key:
            self.drop(entry.key)

    def list_states(self, process_state: str | None, limit: int,
                    continuation: str | None, prefix: str | None = None,
                    ) -> tuple[list[OrderState], str | None]:
        """As the table store: by order id (its partition key), unreadable records left out,
        a page at a time (its continuation: the id the next page starts after)."""
        self.fault("store.list_states")
        after = continuation.removeprefix("after:") if continuation else None
        items = [copy.deepcopy(s) for oid, s in sorted(self.states.items())
                 if (process_state is None or s.process_state.value == process_state)
                 and (prefix is None or oid.startswith(prefix)) and oid not in self.corrupt
                 and (after is None or oid > after)]
        page = items[:limit]
        return page, f"after:{page[-1].order_id}" if len(items) > limit else None

    def order_ids_where(self, column: str, value: str,
                        limit: int) -> tuple[list[str], bool]:
        if not column.isidentifier():
            raise ValueError(f"{column!r} is not a column name")
        self.fault("store.order_ids_where")
        found = sorted(o for o, cols in self.columns.items() if cols.get(column) == value)
        return found[:limit], len(found) <= limit


@dataclass
class QueuedMessage:
    id: int
    body: str
    visible_at: datetime
    dequeue_count: int = 0


class FakeQueues:
    """Storage queues: delayed visibility, a lease on receive, a poison queue after N tries."""

    def __init__(self, clock: Callable[[], datetime], fault: Fault = no_fault,
                 max_dequeue: int = 5, lease: timedelta = timedelta(seconds=10)) -> None:
        self.clock = clock
        self.fault = fault
        self.max_dequeue = max_dequeue
        self.lease = lease
        self.queues: dict[str, list[QueuedMessage]] = {}
        self.poison: dict[str, list[QueuedMessage]] = {}
        self.sent: list[tuple[str, str]] = []
        self._ids = itertools.count(1)

    def send(self, queue: str, body: str, delay: timedelta = timedelta(0)) -> None:
        self.fault("queue.send")
        self.sent.append((queue, body))
        self.queues.setdefault(queue, []).append(
            QueuedMessage(next(self._ids), body, self.clock() + max(delay, timedelta(0))))

    def visible(self, queue: str) -> list[QueuedMessage]:
        now = self.clock()
        return [m for m in self.queues.get(queue, []) if m.visible_at <= now]

    def receive(self, queue: str, message: QueuedMessage) -> QueuedMessage | None:
        """Take a visible message for processing; None when it went to the poison queue."""
        message.dequeue_count += 1
        message.visible_at = self.clock() + self.lease
        if message.dequeue_count > self.max_dequeue:
            self.queues[queue].remove(message)
            self.poison.setdefault(queue, []).append(message)
            return None
        return message

    def complete(self, queue: str, message: QueuedMessage) -> None:
        self.queues[queue].remove(message)


@dataclass
class FakeAlertStore:
    """As the table store: one alert per key (a keyless one is its own, by what it says), kept
    under the table's id (day and row key), listed newest first."""
    fault: Fault = no_fault
    alerts: dict[str, OperatorAlert] = field(default_factory=dict)
    rows: dict[str, StoredAlert] = field(default_factory=dict)
    latest_keys: dict[str, str] = field(default_factory=dict)  # a rolled-up row's latest

    def raise_alert(self, alert: OperatorAlert) -> None:
        self.fault("alerts.raise")
        alert_id = f"{alert_partition(alert.at)}.{alert_row_key(alert)}"
        if rolled_up(alert):
            self.alerts.setdefault(alert.key or repr(alert), alert)
            row = self.rows.get(alert_id)
            if row is not None and alert.key and self.latest_keys.get(alert_id) == alert.key:
                return  # a copy of the latest
            self.latest_keys[alert_id] = alert.key
            self.rows[alert_id] = StoredAlert(
                alert_id, row.raised_at if row else alert.at, alert.kind.value,
                alert.order_id, alert.step or "", alert.reason[:4000], source=alert.source,
                count=(row.count or 1) + 1 if row else 1, last_raised_at=alert.at)
            return
        if (alert.key or repr(alert)) in self.alerts:
            return
        self.alerts[alert.key or repr(alert)] = alert
        self.rows[alert_id] = StoredAlert(alert_id, alert.at, alert.kind.value, alert.order_id,
                                          alert.step or "", alert.reason[:4000])

    def of(self, order_id: str, kind: str | None = None) -> list[OperatorAlert]:
        return [a for a in self.alerts.values()
                if a.order_id == order_id and (kind is None or a.kind == kind)]

    def recent(self, today: datetime, days: int, kind: str | None = None) -> AlertScan:
        self.fault("alerts.recent")
        return _FakeScan(self, days_back(today, days), kind)

    def of_order(self, order_id: str, today: datetime, days: int) -> list[StoredAlert]:
        self.fault("alerts.of_order")
        return [a for day in reversed(days_back(today, days))
                for a in sorted(self._of_day(day), key=lambda a: a.raised_at.isoformat()
                                if a.raised_at else "")
                if a.order_id == order_id]

    def _of_day(self, day: str) -> list[StoredAlert]:
        return [self.rows[i] for i in sorted(self.rows) if i.startswith(day + ".")]

    def acknowledge(self, day: str, row: str, by: str, note: str | None,
                    at: datetime) -> StoredAlert:
        self.fault("alerts.acknowledge")
        alert_id = f"{day}.{row}"
        if (a := self.rows.get(alert_id)) is None:
            raise AlertNotFound(alert_id)
        if a.acknowledged_at is not None:
            raise AckRefused(f"alert {alert_id} was acknowledged by {a.acknowledged_by} "
                             f"at {a.acknowledged_at.isoformat()}")
        a = self.rows[alert_id] = replace(a, acknowledged_by=by, acknowledged_at=at,
                                          ack_note=note)
        return a


class _FakeScan:
    def __init__(self, store: FakeAlertStore, days: list[str], kind: str | None) -> None:
        self._store, self._days, self._kind = store, days, kind
        self.cut = False

    def __iter__(self) -> Iterator[StoredAlert]:
        read = 0
        for day in self._days:
            for a in self._store._of_day(day):
                if self._kind is not None and a.kind != self._kind:
                    continue
                if read == alerts_adapter.ALERT_SCAN:
                    self.cut = True
                    return
                read += 1
                yield a


@dataclass
class FakeRejections:
    fault: Fault = no_fault
    rows: list[Rejection] = field(default_factory=list)

    def record(self, r: Rejection) -> None:
        self.fault("rejections.record")
        # As the table: one row per message (its id and body), a redelivery updates it.
        self.rows = [x for x in self.rows if rejection_row_key(x) != rejection_row_key(r)]
        self.rows.append(r)

    def _stored(self) -> list[StoredRejection]:
        # What the table keeps of each (kept), in its order.
        return [kept(r) for r in sorted(self.rows, key=rejection_row_key)]

    def page(self, limit: int, continuation: str | None, bodies: bool = True
             ) -> tuple[list[StoredRejection], str | None]:
        self.fault("rejections.page")
        start = int(continuation or 0)
        rows = [r if bodies else replace(r, body=None) for r in self._stored()]
        more = start + limit < len(rows)
        return rows[start:start + limit], str(start + limit) if more else None

    def of_message(self, message_id: str) -> StoredRejection | None:
        self.fault("rejections.of_message")
        return next((r for r in self._stored() if r.message_id == message_id), None)


def accepted(store: Any, order_id: str, at: datetime,
             workflow: Any = None) -> OrderState:
    """An order as intake leaves it in the fake store: indexed, stored, Pending."""
    from shared.domain.transitions import receive
    from shared.workflows.orders.message import parse_order
    from tests.workflow import FLOW

    o = parse_order(json.dumps({"order_id": order_id, "customer_id": "c",
                                "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
    return store.create(o, receive(order_id, workflow or FLOW, at))


def supervisor_over_fakes(store: FakeOrderStore, clock: Any, policy: Any, *,
                          ticks: FakeTickLog | None = None,
                          alerts: FakeAlertStore | None = None) -> Any:
    """A Supervisor wired to the fakes as bootstrap wires it to the adapters."""
    from shared.domain.workflow import Registry
    from shared.handlers.relay import EffectRelay
    from shared.handlers.supervisor import Supervisor
    from tests.workflow import FLOW

    alerts = alerts or FakeAlertStore()
    relay = EffectRelay(store=store, sender=FakeQueues(clock), alerts=alerts,
                        workflows=Registry.of([FLOW]),
                        agent_queues={"alpha": "a", "beta": "b", "gamma": "c"},
                        scheduler_queue="cmds", clock=clock)
    return Supervisor(store=store, ticks=ticks or FakeTickLog(), relay=relay, alerts=alerts,
                      policy=policy, workflows=Registry.of([FLOW]),
                      clock=clock)


def in_flight(store: Any, order_id: str, step: str, at: datetime, *, action: str = "do",
              attempt: int = 1, workflow: Any = None, generation: int = 0,
              budget: timedelta = timedelta(seconds=30), token: str | None = None
              ) -> OrderState:
    """An order whose record shows ``step``'s ``action`` at ``attempt`` in flight, in any store
    (fake or real): what an Agent checks the request it is handed against. An order already
    stored is moved there."""
    from shared.domain.messages import new_work_key
    from shared.domain.state import (
        CompensationState,
        ProcessState,
        StepStatus,
    )

    if store.get_state(order_id) is None:
        accepted(store, order_id, at, workflow)
    state = store.get_state(order_id)
    assert state is not None
    state.generation = generation
    s = state.step(step)
    s.attempt = attempt
    s.token = token  # None: as a release before tokens sent it
    s.work_key = new_work_key(order_id, step, generation)
    s.complete_by = at + budget
    state.complete_by = s.complete_by
    if action == "do":
        state.process_state, s.status = ProcessState.PROCESSING, StepStatus.RUNNING
    else:
        state.process_state, s.status = ProcessState.ERROR, StepStatus.COMPENSATING
        state.compensation = CompensationState.RUNNING
    saved: OrderState = store.save(state)
    return saved


def a_call(operation: str = "take", key: str = "o-1.take.do", order_id: str = "o-1",
           **fields: Any) -> Call:
    """A do call of ``operation``, as an Agent makes it, for a client's own tests."""
    from datetime import UTC

    made: dict[str, Any] = {
        "order_id": order_id, "step": operation, "action": Action.DO, "operation": operation,
        "key": key, "attempt": 1, "complete_by": datetime(2100, 1, 1, tzinfo=UTC),
        "input": {"order_id": order_id}, "results": {}, **fields}
    return Call(**made)
