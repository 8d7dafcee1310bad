"""Pauses (shared/domain/pauses.py): what the Supervisor does with an order a pause holds, the
record it writes, and how often an instance reads the pauses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.pauses import CachedPauses
from shared.adapters.state_entity import state_from_entity, state_to_entity
from shared.domain.effects import Dispatch, SendCommand
from shared.domain.pauses import (
    KEEP_ENDED,
    LAG,
    MARGIN,
    NotPausable,
    Pause,
    PauseKind,
    Pauses,
    Target,
)
from shared.domain.state import RetryPolicy, exponential_backoff, schema_of
from shared.domain.supervision import DecisionKind, supervise
from shared.domain.transitions import claim
from tests.fakes import FakeOrderStore, FakePauses, accepted
from tests.workflow import FLOW as WF

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
POLICY = RetryPolicy(3, exponential_backoff(timedelta(seconds=1), timedelta(seconds=4)),
                     pending_grace=timedelta(seconds=30))
ALPHA = Target(PauseKind.SERVICE, "alpha")  # the first step's ("hold")
FLOW = Target(PauseKind.WORKFLOW, WF.name)


def _paused(target: Target, at: datetime = T0) -> Pauses:
    return Pauses({target: Pause(target).pause(at, "ada", "incident")})


def _running() -> tuple[FakeOrderStore, datetime]:
    store = FakeOrderStore()
    running = claim(accepted(store, "o-1", T0, WF), "s1", T0, WF)
    running.outbox = []  # its request went out
    store.save(running)
    assert running.complete_by is not None
    return store, running.complete_by


def test_a_paused_services_overdue_step_waits_said_once_and_nothing_counted_or_sent() -> None:
    store, due = _running()
    state = store.get_state("o-1")
    assert state is not None
    first = supervise(state, due + timedelta(seconds=1), POLICY, WF, pauses=_paused(ALPHA))
    assert first is not None and first.kind is DecisionKind.HOLD
    held = first.state
    assert (held.held, held.failure_count, held.rescues) == ("service:alpha", 0, 0)
    assert held.complete_by == due + timedelta(seconds=1) + POLICY.pause_recheck
    assert not any(isinstance(e, Dispatch) for e in held.outbox)
    assert schema_of(held) == 5  # a release before pauses leaves it alone
    again = supervise(held, held.complete_by, POLICY, WF, pauses=_paused(ALPHA))
    assert again is not None and again.kind is DecisionKind.HOLD
    assert [e.get("detail", "")[:24] for e in again.state.timeline].count(
        "waiting: service alpha p") == 1
    # Resumed: once every instance knows (LAG), sent again, long before the time the hold
    # filed it under, the same attempt under the same key, no failure counted.
    resumed_at = due + timedelta(seconds=5)
    resumed = Pauses({ALPHA: _paused(ALPHA).service("alpha").resume(resumed_at)})
    assert supervise(again.state, resumed_at + LAG / 2, POLICY, WF, pauses=resumed) is None
    out = supervise(again.state, resumed_at + LAG, POLICY, WF, pauses=resumed)
    assert out is not None and out.kind is DecisionKind.RELEASE
    step = out.state.step("hold")
    assert (out.state.held, out.state.failure_count, step.attempt) == (None, 0, 1)
    assert [e for e in out.state.outbox if isinstance(e, Dispatch)] == [
        Dispatch(step="hold", action="do", attempt=1)]
    assert schema_of(out.state) == 2


def test_a_step_whose_attempt_met_a_pause_now_over_is_sent_again_uncounted() -> None:
    """Its Agent dropped the request during a short pause the Supervisor never saw."""
    store, due = _running()
    state = store.get_state("o-1")
    assert state is not None
    short = Pause(ALPHA).pause(T0 + timedelta(seconds=2), "ada", "x").resume(
        T0 + timedelta(seconds=4))
    out = supervise(state, due + timedelta(seconds=1), POLICY, WF, pauses=Pauses({ALPHA: short}))
    assert out is not None and out.kind is DecisionKind.RELEASE
    long_ago = Pause(ALPHA).pause(T0 - timedelta(hours=2), "ada", "x").resume(
        T0 - timedelta(hours=1))
    out = supervise(state, due + timedelta(seconds=1), POLICY, WF,
                    pauses=Pauses({ALPHA: long_ago}))
    assert out is not None and out.kind is DecisionKind.RETRY and out.state.failure_count == 1


def test_a_paused_workflows_order_waits_pending_and_starts_once_resumed() -> None:
    store = FakeOrderStore()
    state = accepted(store, "o-1", T0, WF)
    due = T0 + POLICY.pending_grace + timedelta(seconds=1)
    held = supervise(state, due, POLICY, WF, pauses=_paused(FLOW))
    assert held is not None and held.kind is DecisionKind.HOLD
    assert (held.state.held, held.state.rescues) == ("workflow:" + WF.name, 0)
    out = supervise(held.state, held.state.complete_by, POLICY, WF, pauses=Pauses())
    assert out is not None and out.kind is DecisionKind.RELEASE and out.state.rescues == 0
    assert [e.command for e in out.state.outbox if isinstance(e, SendCommand)] == ["start"]


def test_a_held_record_reads_back_held() -> None:
    store, due = _running()
    state = store.get_state("o-1")
    assert state is not None
    decision = supervise(state, due + timedelta(seconds=1), POLICY, WF, pauses=_paused(ALPHA))
    assert decision is not None
    entity = state_to_entity(decision.state)
    assert (entity["Held"], entity["SchemaVersion"]) == ("service:alpha", 5)

    class _Entity(dict):  # type: ignore[type-arg]
        metadata = {"etag": "e1"}

    assert state_from_entity(_Entity(entity)).held == "service:alpha"


def test_pausing_twice_or_resuming_what_runs_is_refused_and_recent_pauses_are_kept() -> None:
    p = Pause(ALPHA).pause(T0, "ada", "incident")
    with pytest.raises(NotPausable, match="paused already, by ada since 2026-01-01 12:00:00Z"):
        p.pause(T0, "bob", "again")
    with pytest.raises(NotPausable, match="service alpha is not paused"):
        Pause(ALPHA).resume(T0)
    for n in range(KEEP_ENDED + 5):
        p = p.resume(T0 + timedelta(minutes=2 * n + 1)).pause(
            T0 + timedelta(minutes=2 * n + 2), "ada", "again")
    assert len(p.ended) == KEEP_ENDED and p.ended[-1][1] == T0 + timedelta(
        minutes=2 * (KEEP_ENDED + 4) + 1)


def test_an_instance_reads_the_pauses_at_most_once_per_interval() -> None:
    store = FakePauses()
    reads: list[str] = []
    store.fault = reads.append
    now = [0.0]
    cached = CachedPauses(store, 5.0, monotonic=lambda: now[0])
    assert not cached.current().service("alpha").paused
    store.write(Pause(ALPHA).pause(T0, "ada", "x"), None)
    now[0] = 4.9
    assert not cached.current().service("alpha").paused  # not yet: at most 5 s late
    now[0] = 5.0
    assert cached.current().service("alpha").paused
    assert reads.count("pauses.read") == 2


def test_an_attempt_sent_just_after_a_resume_is_excused_for_an_agents_late_view() -> None:
    """An Agent learns of a resume up to LAG late, and drops what it is handed meanwhile: an
    attempt begun within LAG (and a MARGIN for clocks) of the resume is sent again uncounted;
    one begun later is not."""
    store, due = _running()
    state = store.get_state("o-1")
    assert state is not None
    step = state.step("hold")
    assert step.complete_by is not None
    started = step.complete_by - WF.step("hold").budget
    for resumed_before, excused in ((LAG + MARGIN - timedelta(seconds=1), True),
                                    (LAG + MARGIN + timedelta(seconds=1), False)):
        pause = Pause(ALPHA).pause(started - timedelta(minutes=5), "ada", "x").resume(
            started - resumed_before)
        out = supervise(state, due + timedelta(seconds=1), POLICY, WF,
                        pauses=Pauses({ALPHA: pause}))
        assert out is not None
        assert out.kind is (DecisionKind.RELEASE if excused else DecisionKind.RETRY)
