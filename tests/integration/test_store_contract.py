"""One contract, two stores: the in-memory fake the service-layer tests use and the Table
Storage adapter against Azurite must behave the same, or the fast tests prove nothing."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.limits import LimitStore, TableLimits
from shared.adapters.pauses import PauseStore, TablePauses
from shared.adapters.redrives import RedriveStore, TableRedrives
from shared.adapters.state_store import (
    ConcurrencyConflict,
    OrderAlreadyExists,
    OrderNotStorable,
    OrderStore,
    TableOrderStore,
)
from shared.adapters.tick_log import TableTickLog, TickLogStore
from shared.domain import budget
from shared.domain.due_index import IndexKey
from shared.domain.limits import Lease, LimitState
from shared.domain.outages import TickLog
from shared.domain.pauses import Pause, PauseKind, Target
from shared.domain.redrive import Redrive, Selection
from shared.domain.state import ProcessState
from shared.domain.transitions import receive
from shared.workflows.orders import ORDER_FULFILMENT
from shared.workflows.orders.message import parse_order
from tests.fakes import FakeLimits, FakeOrderStore, FakePauses, FakeRedrives, FakeTickLog
from tests.integration.helpers import order

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
GRACE = timedelta(seconds=30)  # the fake's default


@pytest.fixture(params=["fake", "table"])
def store(request: pytest.FixtureRequest,
          app_env: Callable[..., dict[str, str]]) -> Iterator[OrderStore]:
    if request.param == "fake":
        yield FakeOrderStore()
        return
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    yield TableOrderStore(c.tables.get_table_client(c.settings.state_table),
                          c.tables.get_table_client(c.settings.inflight_table), GRACE)


def create(store: OrderStore, order_id: str = "o-1", **changes: str):  # type: ignore[no-untyped-def]
    o = parse_order(json.dumps(order(order_id, **changes)))
    return o, store.create(o, receive(order_id, ORDER_FULFILMENT, T0))


def test_create_then_read_back(store: OrderStore) -> None:
    o, saved = create(store)
    assert saved.version
    loaded = store.load("o-1")
    assert loaded is not None and loaded.fingerprint == o.fingerprint()
    assert loaded.state == saved and loaded.state.version == saved.version
    assert loaded.state.outbox == saved.outbox != []
    assert store.get_state("o-1") == saved
    assert store.load("nope") is None and store.get_state("nope") is None


def test_a_second_create_names_the_first_ones_fingerprint(store: OrderStore) -> None:
    o, _ = create(store)
    with pytest.raises(OrderAlreadyExists) as e:
        create(store, customer_id="other")
    assert e.value.fingerprint == o.fingerprint()


def test_save_is_conditional_on_the_version_read(store: OrderStore) -> None:
    _, saved = create(store)
    first = store.get_state("o-1")
    second = store.get_state("o-1")
    assert first is not None and second is not None
    first.process_state = ProcessState.PROCESSING
    new = store.save(first)
    assert new.version != saved.version
    second.failure_count = 9
    with pytest.raises(ConcurrencyConflict):
        store.save(second)
    current = store.get_state("o-1")
    assert current is not None and current.process_state is ProcessState.PROCESSING
    assert current.failure_count == 0


def test_confirming_an_outbox_clears_it_only_on_the_version_it_was_read_with(
        store: OrderStore) -> None:
    _, saved = create(store)
    confirmed = store.confirm_outbox(saved)
    assert confirmed.outbox == [] and confirmed.version != saved.version
    current = store.get_state("o-1")
    assert current is not None and current.outbox == [] and current.version == confirmed.version
    assert current.outbox_seq == saved.outbox_seq
    with pytest.raises(ConcurrencyConflict):
        store.confirm_outbox(saved)


def due(store: OrderStore, at: datetime) -> list[tuple[str, int]]:
    return sorted((e.order_id, e.generation) for e in store.due(at, 100))


def test_an_order_is_filed_by_its_due_time_and_found_only_once_it_comes(
        store: OrderStore) -> None:
    _, saved = create(store)
    # Filed before the record that names it, at the time the Supervisor would step in.
    key = IndexKey.parse(saved.index_key or "")
    assert key.due == T0 + GRACE
    assert due(store, T0 + GRACE - timedelta(microseconds=1)) == []
    (entry,) = store.due(T0 + GRACE, 100)
    assert (entry.key, entry.order_id, entry.generation, entry.since, entry.base) == (
        saved.index_key, "o-1", 0, T0, "")
    _, other = create(store, "o-2")
    assert due(store, T0 + timedelta(days=1)) == [("o-1", 0), ("o-2", 0)]
    assert len(store.due(T0 + timedelta(days=1), 1)) == 2  # at most 1 per partition
    assert IndexKey.parse(other.index_key or "").partition != key.partition


def test_a_write_that_makes_an_order_due_earlier_files_it_anew_first(
        store: OrderStore) -> None:
    _, s = create(store)
    first = s.index_key
    later = T0 + timedelta(seconds=10)
    s.process_state, s.complete_by, s.updated_at = ProcessState.PROCESSING, T0 + GRACE * 2, later
    s = store.save(s)
    assert s.index_key == first  # due later: its entry still comes first
    s.complete_by = T0 + timedelta(seconds=20)
    version = s.version
    s = store.save(s)
    assert s.index_key != first and IndexKey.parse(s.index_key or "").due == s.complete_by
    (entry,) = store.due(T0 + timedelta(days=1), 100)
    assert (entry.key, entry.base, entry.since) == (s.index_key, version, later)
    assert store.get_state("o-1") == s


def test_a_move_files_the_order_at_its_due_time_and_drops_the_old_entry(
        store: OrderStore) -> None:
    _, s = create(store)
    s.complete_by = T0 + timedelta(minutes=5)
    s = store.save(s)
    assert due(store, T0 + GRACE) == [("o-1", 0)]  # filed at the earlier time still
    s = store.save(s, move=True)
    assert due(store, T0 + GRACE) == []
    assert due(store, T0 + timedelta(minutes=5)) == [("o-1", 0)]
    assert store.save(s, move=True).index_key == s.index_key  # already there: kept


def test_a_write_that_loses_its_race_leaves_an_entry_no_record_names(
        store: OrderStore) -> None:
    _, s = create(store)
    stale = store.get_state("o-1")
    assert stale is not None
    store.save(s)
    stale.complete_by = T0 + timedelta(seconds=5)
    with pytest.raises(ConcurrencyConflict):
        store.save(stale)
    # The caller's copy is as it was: it names no entry that its failed write filed.
    assert stale.index_key == s.index_key
    current = store.get_state("o-1")
    assert current is not None and current.index_key == s.index_key
    entries = store.due(T0 + timedelta(days=1), 100)
    assert len(entries) == 2 and s.index_key in {e.key for e in entries}
    (orphan,) = [e for e in entries if e.key != current.index_key]
    assert orphan.base != current.version  # so nothing can name it any more


def test_a_write_leaves_the_state_it_was_given_as_it_was(store: OrderStore) -> None:
    _, created = create(store)
    before = copy.deepcopy(created)
    created.complete_by = T0 + timedelta(seconds=5)  # due sooner: filed anew
    given = copy.deepcopy(created)
    saved = store.save(created)
    assert created == given and created.version == before.version
    assert saved.index_key != before.index_key and saved.version != before.version
    assert store.get_state("o-1") == saved


def test_a_settled_write_keeps_the_entry_for_its_forget_to_drop(store: OrderStore) -> None:
    _, s = create(store)
    s.process_state = ProcessState.PROCESSED
    s = store.save(s, move=True)
    (entry,) = store.due(T0 + timedelta(days=1), 100)
    assert entry.key == s.index_key
    store.drop(entry.key)
    store.drop(entry.key)  # idempotent
    assert store.due(T0 + timedelta(days=1), 100) == []


def test_a_second_create_takes_its_entry_back(store: OrderStore) -> None:
    o, saved = create(store)
    with pytest.raises(OrderAlreadyExists):
        store.create(o, receive("o-1", ORDER_FULFILMENT, T0 + timedelta(seconds=1)))
    assert [e.key for e in store.due(T0 + timedelta(days=1), 100)] == [saved.index_key]


@pytest.mark.parametrize("units", [budget.STRING_PROPERTY, budget.STRING_PROPERTY + 1])
def test_an_order_past_the_property_limit_is_not_storable_and_leaves_nothing(
        store: OrderStore, units: int) -> None:
    """Valid orders fit (docs/limits.md); one that would not is refused for what it is, not
    as an outage, and leaves neither a record nor an index entry behind."""
    o = parse_order(json.dumps(order("o-big")))
    padding = units - budget.json_units(o.document())
    big = o.model_copy(update={"customer_id": o.customer_id + "\U0001F600" * (padding // 2)
                                              + "x" * (padding % 2)})
    assert budget.json_units(big.document()) == units
    if units <= budget.STRING_PROPERTY:
        assert store.create(big, receive("o-big", ORDER_FULFILMENT, T0)).version
        return
    with pytest.raises(OrderNotStorable) as e:
        store.create(big, receive("o-big", ORDER_FULFILMENT, T0))
    assert e.value.reason == "PropertyValueTooLarge"
    assert store.get_state("o-big") is None
    assert store.due(T0 + timedelta(days=1), 100) == []


def test_an_unreadable_record_is_filed_aside_and_marked(store: OrderStore) -> None:
    _, saved = create(store)
    (entry,) = store.due(T0 + timedelta(days=1), 100)
    aside = T0 + timedelta(days=2)
    store.quarantine(entry, "v-bad", aside)
    assert store.due(T0 + timedelta(days=1), 100) == []  # out of the way of what is behind it
    (moved,) = store.due(aside, 100)
    assert (moved.order_id, moved.generation, moved.unreadable, moved.base) == (
        "o-1", saved.generation, "v-bad", "v-bad")
    assert moved.key != entry.key
    store.quarantine(moved, "v-bad", aside)  # again at the same time: the same one entry
    assert store.due(aside, 100) == [moved]


@pytest.fixture(params=["fake", "table"])
def tick_log(request: pytest.FixtureRequest,
             app_env: Callable[..., dict[str, str]]) -> Iterator[TickLogStore]:
    if request.param == "fake":
        yield FakeTickLog()
        return
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    yield TableTickLog(c.tables.get_table_client(c.settings.inflight_table))


def test_the_tick_log_reads_back_what_was_written_and_refuses_a_stale_write(
        tick_log: TickLogStore) -> None:
    empty, v0 = tick_log.read()
    assert empty == TickLog() and v0 is None
    log = TickLog().after_tick(T0, timedelta(seconds=75)).after_tick(
        T0 + timedelta(seconds=200), timedelta(seconds=75))
    tick_log.write(log, v0)
    read, v1 = tick_log.read()
    assert read == log and v1 is not None
    with pytest.raises(ConcurrencyConflict):
        tick_log.write(log, v0)  # someone wrote since v0
    tick_log.write(read.after_tick(T0 + timedelta(seconds=230), timedelta(seconds=75)), v1)
    with pytest.raises(ConcurrencyConflict):
        tick_log.write(log, v1)


def test_the_tick_log_is_not_in_the_in_flight_index(app_env: Callable[..., dict[str, str]]
                                                    ) -> None:
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    TableTickLog(c.tables.get_table_client(c.settings.inflight_table)).write(
        TickLog().after_tick(T0, timedelta(seconds=75)), None)
    assert c.store.due(T0 + timedelta(days=3650), 100) == []


@pytest.fixture(params=["fake", "table"])
def pauses(request: pytest.FixtureRequest,
           app_env: Callable[..., dict[str, str]]) -> Iterator[PauseStore]:
    if request.param == "fake":
        yield FakePauses()
        return
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    yield TablePauses(c.tables.get_table_client(c.settings.inflight_table))


def test_a_pause_is_written_only_at_the_version_read_and_read_back_whole(
        pauses: PauseStore) -> None:
    beta = Target(PauseKind.SERVICE, "beta")
    pause, version = pauses.read(beta)
    assert (pause, version) == (Pause(beta), None)
    paused = pause.pause(T0, "ada", "incident")
    pauses.write(paused, None)
    with pytest.raises(ConcurrencyConflict):
        pauses.write(paused, None)  # a second operator's pause, read before the first's
    read, version = pauses.read(beta)
    assert read == paused and version is not None
    resumed = read.resume(T0 + timedelta(minutes=5))
    pauses.write(resumed, version)
    with pytest.raises(ConcurrencyConflict):
        pauses.write(resumed, version)
    everything = pauses.read_all()
    assert everything.service("beta") == resumed and not everything.current
    assert resumed.ended == ((T0, T0 + timedelta(minutes=5)),)
    assert everything.workflow("flow") == Pause(Target(PauseKind.WORKFLOW, "flow"))


def test_an_order_held_by_a_pause_is_found_by_it_before_its_time(store: OrderStore) -> None:
    _, saved = create(store, "h-1")
    create(store, "h-2")
    held = dataclasses.replace(saved, held="service:beta", complete_by=T0 + timedelta(minutes=10))
    held = store.save(held, move=True)
    assert held.index_key is not None
    found = store.held("service:beta", T0, 10)
    assert [(e.order_id, e.held, e.key) for e in found] == [("h-1", "service:beta",
                                                             held.index_key)]
    assert store.held("service:alpha", T0, 10) == []
    assert store.held("service:beta", T0 + timedelta(minutes=10), 10) == []  # filed by then
    due = store.due(T0 + timedelta(minutes=10), 10)
    assert {e.order_id: e.held for e in due} == {"h-1": "service:beta", "h-2": None}
    # Filed aside (a newer release's record, an unreadable one), it is found all the same.
    (entry,) = found
    store.quarantine(entry, "v9", T0 + timedelta(hours=2))
    assert [e.order_id for e in store.held("service:beta", T0, 10)] == ["h-1"]


def test_pauses_are_not_in_the_in_flight_index(app_env: Callable[..., dict[str, str]]) -> None:
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    TablePauses(c.tables.get_table_client(c.settings.inflight_table)).write(
        Pause(Target(PauseKind.SERVICE, "beta")).pause(T0, None, "x"), None)
    assert c.store.due(T0 + timedelta(days=3650), 100) == []


def test_a_listing_is_by_id_of_one_state_and_prefix_and_leaves_out_the_unreadable(
        store: OrderStore) -> None:
    for oid in ("p-2", "p-1", "q-1"):
        create(store, oid)
    first, _ = store.list_states(None, 10, None, prefix="p-")
    assert [s.order_id for s in first] == ["p-1", "p-2"]
    _make_unreadable(store, "p-2")
    assert [s.order_id for s in store.list_states(None, 10, None)[0]] == ["p-1", "q-1"]
    assert store.list_states("Processing", 10, None)[0] == []
    assert [s.order_id for s in store.list_states("Pending", 1, None)[0]] == ["p-1"]


def _make_unreadable(store: OrderStore, order_id: str) -> None:
    if isinstance(store, FakeOrderStore):
        store.corrupt[order_id] = "ProcessState: 'Exploded' is not a valid ProcessState"
        return
    table = store._states  # type: ignore[attr-defined]
    e = table.get_entity(order_id, "state")
    e["ProcessState"] = "Exploded"
    table.update_entity(e)


def test_orders_are_found_by_a_column_their_model_writes(store: OrderStore) -> None:
    create(store, "c-1", customer_id="cust-a")
    create(store, "c-2", customer_id="cust-b")
    create(store, "c-3", customer_id="cust-a")
    # ... and whether that is all of them
    assert store.order_ids_where("CustomerId", "cust-a", 10) == (["c-1", "c-3"], True)
    assert store.order_ids_where("CustomerId", "cust-a", 2) == (["c-1", "c-3"], True)
    assert store.order_ids_where("CustomerId", "cust-a", 1) == (["c-1"], False)
    assert store.order_ids_where("CustomerId", "nobody", 10) == ([], True)
    with pytest.raises(ValueError, match="column"):
        store.order_ids_where("CustomerId eq 'x' or true", "v", 10)


@pytest.fixture(params=["fake", "table"])
def limits(request: pytest.FixtureRequest,
           app_env: Callable[..., dict[str, str]]) -> Iterator[LimitStore]:
    if request.param == "fake":
        yield FakeLimits()
        return
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    yield TableLimits(c.tables.get_table_client(c.settings.inflight_table))


def test_a_limit_is_written_only_at_the_version_read_and_read_back_whole(
        limits: LimitStore) -> None:
    assert limits.read("beta") == (LimitState(), None)
    first = LimitState(next_start=1_800_000_000.25,
                       leases=(Lease("a.1", 1_800_000_010.5), Lease("b.7", 1_800_000_011.0)),
                       slow_until=1_800_000_003.0, slow_reason="HTTP 429 busy")
    v1 = limits.write("beta", first, None)
    with pytest.raises(ConcurrencyConflict):
        limits.write("beta", first, None)  # a second instance's first grant, read as absent
    assert limits.read("beta") == (first, v1)
    second = LimitState(next_start=1_800_000_000.3, leases=first.leases[1:])
    v2 = limits.write("beta", second, v1)
    assert v2 != v1
    with pytest.raises(ConcurrencyConflict):
        limits.write("beta", first, v1)  # read before the write that won
    assert limits.read("beta") == (second, v2)
    assert limits.read("gamma") == (LimitState(), None)  # one record per service


def test_limits_are_not_in_the_in_flight_index(app_env: Callable[..., dict[str, str]]) -> None:
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    TableLimits(c.tables.get_table_client(c.settings.inflight_table)).write(
        "beta", LimitState(leases=(Lease("a.1", 1.0),)), None)
    assert c.store.due(T0 + timedelta(days=3650), 100) == []


@pytest.fixture(params=["fake", "table"])
def redrives(request: pytest.FixtureRequest,
             app_env: Callable[..., dict[str, str]]) -> Iterator[RedriveStore]:
    if request.param == "fake":
        yield FakeRedrives()
        return
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    yield TableRedrives(c.tables.get_table_client(c.settings.inflight_table))


def test_redrives_are_written_at_the_version_read_and_listed_newest_first(
        redrives: RedriveStore) -> None:
    def made(at: datetime) -> Redrive:
        return Redrive(id=Redrive.new_id(at), selection=Selection(failed_step="take"), rate=20,
                       reason="beta is back", by="ada", created=at)

    old, new = made(T0), made(T0 + timedelta(minutes=1))
    assert redrives.read(old.id) == (None, None)
    v_old = redrives.write(old, None)
    redrives.write(new, None)
    with pytest.raises(ConcurrencyConflict):
        redrives.write(old, None)
    assert redrives.read(old.id) == (old, v_old)
    assert [r.id for r, _ in redrives.listed(10)] == [new.id, old.id]
    cancelled = old.cancel(T0, "bo", "wrong")
    redrives.write(cancelled, v_old)
    with pytest.raises(ConcurrencyConflict):
        redrives.write(old.pause(T0, "bo", ""), v_old)
    assert [r.id for r, _ in redrives.listed(10, active_only=True)] == [new.id]
    paused = new.pause(T0, "bo", "")
    redrives.write(paused, redrives.read(new.id)[1])
    assert [r.state.value for r, _ in redrives.listed(10, active_only=True)] == ["paused"]
