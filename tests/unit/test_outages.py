"""Outages from the Supervisor's tick log: a step whose time fell in one costs no failure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.domain.outages import NEVER, Gap, TickLog
from shared.domain.state import RetryPolicy, exponential_backoff
from shared.domain.supervision import DecisionKind, supervise
from shared.domain.transitions import claim
from tests.conftest import FakeClock
from tests.fakes import FakeOrderStore, FakeTickLog, accepted, supervisor_over_fakes
from tests.workflow import FLOW as WF

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
GAP = timedelta(seconds=75)
POLICY = RetryPolicy(3, exponential_backoff(timedelta(seconds=1), timedelta(seconds=4)),
                     pending_grace=timedelta(seconds=30), outage_gap=GAP)


def test_a_gap_is_recorded_only_when_ticks_stop_for_longer_than_the_outage_gap() -> None:
    log = TickLog().after_tick(T0, GAP)
    assert log.gaps == (Gap(NEVER, T0),)  # before the first tick, nothing showed progress
    log = log.after_tick(T0 + timedelta(seconds=30), GAP)
    assert log.last_tick == T0 + timedelta(seconds=30) and len(log.gaps) == 1
    log = log.after_tick(T0 + timedelta(seconds=130), GAP)
    assert log.gaps[-1] == Gap(T0 + timedelta(seconds=30), T0 + timedelta(seconds=130))
    assert log.gap_during(T0 + timedelta(seconds=100), T0 + timedelta(seconds=140))
    # The recovery after it lasts as long as the outage did (100 s): still excused...
    assert log.gap_during(T0 + timedelta(seconds=200), T0 + timedelta(seconds=230))
    # ...and no longer after that; nor is anything after the first tick's "gap".
    assert log.gap_during(T0 + timedelta(seconds=230), T0 + timedelta(seconds=260)) is None
    assert TickLog().after_tick(T0, GAP).gap_during(T0, T0 + timedelta(seconds=1)) is None


def test_two_supervisors_keep_every_gap_either_saw() -> None:
    a = TickLog(T0, (Gap(T0 - timedelta(minutes=5), T0 - timedelta(minutes=3)),))
    b = TickLog(T0 + timedelta(seconds=1), (Gap(T0 - timedelta(minutes=2), T0),))
    merged = a.merge(b)
    assert merged.last_tick == b.last_tick and set(merged.gaps) == set(a.gaps) | set(b.gaps)
    again = TickLog.from_parts(merged.last_tick, merged.gaps_to_json())
    assert again == merged


def _running(order_id: str = "o-1") -> tuple[FakeOrderStore, str]:
    store = FakeOrderStore()
    s = accepted(store, order_id, T0, WF)
    running = claim(s, "s1", T0, WF)
    running.outbox = []  # its request went out
    store.save(running)
    return store, order_id


def test_a_step_due_in_an_outage_is_sent_again_without_a_failure() -> None:
    store, oid = _running()
    state = store.get_state(oid)
    assert state is not None and state.complete_by is not None
    after = state.complete_by + timedelta(seconds=60)
    quiet = TickLog(state.complete_by - timedelta(seconds=1)).after_tick(after, GAP)
    decision = supervise(state, after, POLICY, WF, quiet)
    assert decision is not None and decision.kind is DecisionKind.RETRY  # 61 s: no outage
    assert decision.state.failure_count == 1
    down = TickLog(state.complete_by - timedelta(seconds=100)).after_tick(after, GAP)
    decision = supervise(state, after, POLICY, WF, down)
    assert decision is not None and decision.kind is DecisionKind.OUTAGE
    assert decision.state.failure_count == 0 and decision.state.rescues == 1
    assert "outage" in decision.reason
    step = decision.state.current_step
    assert step is not None and step.complete_by is not None and step.complete_by > after


def test_a_tick_records_itself_and_recoveries_are_paced() -> None:
    clock = FakeClock(T0)
    store, ticks = FakeOrderStore(), FakeTickLog()
    policy = RetryPolicy(3, exponential_backoff(timedelta(seconds=1), timedelta(seconds=4)),
                         pending_grace=timedelta(seconds=30), outage_gap=GAP,
                         max_recoveries_per_tick=2)
    sup = supervisor_over_fakes(store, clock, policy, ticks=ticks)
    for i in range(5):
        accepted(store, f"o-{i}", T0, WF)
    clock.advance(seconds=120)
    first = sup.tick()
    assert (first.rescued, first.deferred) == (2, 3)
    assert ticks.log.last_tick == clock.now and ticks.version is not None
    clock.advance(seconds=10)
    second = sup.tick()
    assert (second.rescued, second.deferred) == (2, 1)
    clock.advance(seconds=10)
    assert sup.tick().rescued == 1
    assert all(s.rescues == 1 for s in store.states.values())


def test_a_tick_that_hangs_on_storage_excuses_what_fell_due_meanwhile() -> None:
    """The tick began before the outage and got its answer after it: no gap between ticks."""
    clock = FakeClock(T0)

    class Hangs(FakeOrderStore):
        hang = True

        def due(self, now, limit):  # type: ignore[no-untyped-def]
            if self.hang:
                clock.advance(seconds=120)  # storage answers two minutes later
                self.hang = False
            return super().due(now, limit)  # what was due when the tick asked

    store, ticks = Hangs(), FakeTickLog()
    sup = supervisor_over_fakes(store, clock, POLICY, ticks=ticks)
    s = accepted(store, "o-1", T0, WF)
    running = claim(s, "s1", T0, WF)
    running.outbox = []
    store.save(running)
    ticks.log = TickLog(T0)  # the Supervisor was ticking when the step began
    assert sup.tick().due == 0  # the step fell due while the tick waited
    report = sup.tick()
    assert report.excused == 1 and report.retried == 0
    assert store.states["o-1"].failure_count == 0
    assert any(g.end - g.start >= timedelta(seconds=120) for g in ticks.log.gaps)


def test_the_time_before_the_first_tick_is_not_called_an_outage() -> None:
    """A new deployment's first orders may be due before any tick: excused, as nothing shows the
    pipeline working, but the note says so rather than naming an outage from 00:00:00."""
    store, oid = _running()
    state = store.get_state(oid)
    assert state is not None and state.complete_by is not None
    first = state.complete_by + timedelta(seconds=5)
    decision = supervise(state, first, POLICY, WF, TickLog().after_tick(first, GAP))
    assert decision is not None and decision.kind is DecisionKind.OUTAGE
    assert "first recorded tick" in decision.reason and "outage" not in decision.reason
    assert "00:00:00" not in decision.reason
