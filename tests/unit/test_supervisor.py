"""The Supervisor over the in-memory fakes: each order on its own, whatever the others do."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.domain.alerts import AlertKind
from shared.domain.state import OrderState, RetryPolicy, exponential_backoff
from shared.handlers.supervisor import FAILING_TICKS_BEFORE_ALERT, Supervisor
from tests.conftest import FakeClock
from tests.fakes import FakeAlertStore, FakeOrderStore, StorageDown, accepted, supervisor_over_fakes


class SaveFails(FakeOrderStore):
    """A store that cannot save some orders (say their record grew past the entity limit)."""

    def __init__(self) -> None:
        super().__init__()
        self.broken: set[str] = set()

    def save(self, state: OrderState, *, move: bool = False) -> OrderState:
        if state.order_id in self.broken:
            raise StorageDown("EntityTooLarge")
        return super().save(state, move=move)


def setup() -> tuple[FakeClock, SaveFails, FakeAlertStore, Supervisor]:
    clock = FakeClock()
    store, alerts = SaveFails(), FakeAlertStore()
    policy = RetryPolicy(3, exponential_backoff(timedelta(seconds=1), timedelta(seconds=4)),
                         pending_grace=timedelta(seconds=30), rescue_threshold=100)
    return clock, store, alerts, supervisor_over_fakes(store, clock, policy, alerts=alerts)


def pending(store: FakeOrderStore, clock: FakeClock, order_id: str) -> None:
    accepted(store, order_id, clock.now)


def test_an_order_that_keeps_failing_is_alerted_once_and_the_rest_go_on() -> None:
    clock, store, alerts, sup = setup()
    pending(store, clock, "a-broken")
    pending(store, clock, "b-fine")
    store.broken.add("a-broken")
    for tick in range(1, FAILING_TICKS_BEFORE_ALERT + 3):
        clock.advance(seconds=61)
        report = sup.tick()
        assert (report.errors, report.rescued) == (1, 1)  # the other order is rescued each time
        expected = 1 if tick >= FAILING_TICKS_BEFORE_ALERT else 0
        assert len(alerts.of("a-broken", AlertKind.SUPERVISION_FAILING)) == expected
    assert "EntityTooLarge" in alerts.of("a-broken")[0].reason
    assert "StorageDown" not in alerts.of("a-broken")[0].reason  # in words, not Python's
    assert store.states["b-fine"].rescues == FAILING_TICKS_BEFORE_ALERT + 2


def test_one_bad_tick_is_not_an_alert() -> None:
    clock, store, alerts, sup = setup()
    pending(store, clock, "a")
    store.broken.add("a")
    clock.advance(seconds=61)
    assert sup.tick().errors == 1
    store.broken.clear()
    for _ in range(FAILING_TICKS_BEFORE_ALERT):
        clock.advance(seconds=61)
        assert sup.tick().errors == 0
    assert alerts.alerts == {}


def test_an_entry_a_write_may_still_name_is_kept_and_one_whose_writer_died_is_dropped() -> None:
    """Between filing a new entry and writing the record that names it, a write can be slow.
    The Supervisor meeting that entry first must leave it while the write can still land (the
    record is at the version the entry was filed against, within the grace), and drop it once
    the writer is evidently gone. The model's steps are atomic, so it never meets this case."""
    clock = FakeClock()
    stalled = {"on": False}

    def fault(op: str) -> None:
        if stalled["on"] and op == "store.save":  # after its entry, before the record
            raise StorageDown("the writer stalls here")

    store = FakeOrderStore(fault)
    policy = RetryPolicy(3, exponential_backoff(timedelta(seconds=1), timedelta(seconds=4)),
                         pending_grace=timedelta(seconds=30), rescue_threshold=100)
    sup = supervisor_over_fakes(store, clock, policy)
    writes, filed = {}, {}
    for oid in ("slow", "dead"):
        accepted(store, oid, clock.now)
        s = store.get_state(oid)
        assert s is not None
        s.complete_by = clock.now + timedelta(seconds=5)  # due sooner: a new entry first
        before = set(store.index)
        stalled["on"] = True
        with pytest.raises(StorageDown):
            store.save(s)
        stalled["on"] = False
        assert s.index_key in before  # the caller's copy names only what the store recorded
        (filed[oid],) = set(store.index) - before
        writes[oid] = s
    clock.advance(seconds=6)  # both new entries are due; the writes may still land
    assert sup.tick().dropped == 0
    saved = store.save(writes["slow"])  # the slow write lands, naming its entry
    assert saved.index_key == filed["slow"] and saved.index_key in store.index
    clock.advance(seconds=30)  # the other writer is gone
    sup.tick()
    assert filed["dead"] not in store.index
    assert store.states["dead"].index_key in store.index  # the record's own entry stays
    assert store.states["slow"].index_key in store.index


def test_a_newer_releases_workflow_is_left_alone_and_a_removed_one_goes_to_an_operator() -> None:
    """In a rolling deployment this release may meet an order of a workflow version only the
    next release has: its Supervisor follows it. A workflow no release has is an operator's."""
    import dataclasses

    from shared.domain.state import SCHEMA_VERSION

    clock, store, alerts, sup = setup()
    pending(store, clock, "a-newer")
    pending(store, clock, "b-removed")
    pending(store, clock, "c-newer-record")
    pending(store, clock, "d-newer-unreadable")
    store.corrupt["d-newer-unreadable"] = "newer: 'Held' is not a valid ProcessState"
    store.states["a-newer"] = dataclasses.replace(store.states["a-newer"], workflow_version=99)
    # A record a newer release wrote, of a schema this one does not know: the same.
    store.states["c-newer-record"] = dataclasses.replace(store.states["c-newer-record"],
                                                         schema_version=SCHEMA_VERSION + 1)
    newer_record = store.states["c-newer-record"]
    store.states["b-removed"] = dataclasses.replace(store.states["b-removed"],
                                                    workflow="gone-workflow")
    before = store.states["a-newer"]
    clock.advance(seconds=61)
    report = sup.tick()
    assert (report.skipped, report.unreadable, report.errors) == (3, 1, 0)
    assert store.states["a-newer"] == before
    assert store.states["c-newer-record"] == newer_record
    assert store.states["c-newer-record"].version == newer_record.version  # never written
    assert alerts.of("a-newer") == [] and alerts.of("c-newer-record") == []
    assert alerts.of("d-newer-unreadable") == []  # not broken: not reported as such
    [alert] = alerts.of("b-removed", AlertKind.RECORD_UNREADABLE)
    assert "Error:" not in alert.reason  # in words: no exception class before the reason
    assert "gone-workflow" in alert.reason
