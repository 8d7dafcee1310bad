"""A step's own failure policy (shared/domain/step_policy.py): its attempts counted for it alone,
its backoff, and the answers of its service it declares worth asking again."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.remote_service import PermanentServiceError
from shared.circuit_breaker import CircuitBreaker
from shared.domain.messages import ReplyOutcome
from shared.domain.resubmission import resubmit
from shared.domain.state import ProcessState, RetryPolicy, StepStatus, exponential_backoff
from shared.domain.step_policy import StepRetry
from shared.domain.supervision import DecisionKind, supervise
from shared.domain.transitions import claim
from shared.domain.workflow import Registry, Workflow
from shared.handlers.agent import Agent, AgentRetryPolicy, RequestCheck
from tests.conftest import FakeClock
from tests.fakes import FakeAlertStore, FakeOrderStore, accepted, in_flight
from tests.unit.test_agent import Script, request
from tests.workflow import FLOW

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
POLICY = RetryPolicy(3, exponential_backoff(timedelta(seconds=1), timedelta(seconds=4)),
                     pending_grace=timedelta(seconds=30))


def _with(step: str, retry: StepRetry) -> Workflow:
    return dataclasses.replace(FLOW, steps=tuple(
        dataclasses.replace(s, retry=retry) if s.name == step else s for s in FLOW.steps))


def _timeouts(wf: Workflow, n: int) -> list[DecisionKind]:
    """The Supervisor's decisions as the first step times out ``n`` times in a row."""
    store = FakeOrderStore()
    state = claim(accepted(store, "o-1", T0, wf), "s1", T0, wf)
    state.outbox = []
    kinds = []
    for _ in range(n):
        assert state.complete_by is not None
        decision = supervise(state, state.complete_by + timedelta(seconds=1), POLICY, wf)
        assert decision is not None
        kinds.append(decision.kind)
        state = decision.state
        if state.process_state is ProcessState.PENDING:  # its retry: claimed again
            state = claim(state, "s1", state.updated_at + timedelta(minutes=1), wf)
            state.outbox = []
        else:
            break
    return kinds


def test_a_step_declaring_its_attempts_fails_after_its_own_count_not_the_apps() -> None:
    retry, fail = DecisionKind.RETRY, DecisionKind.FAIL
    assert _timeouts(FLOW, 5) == [retry, retry, fail]  # FailureThreshold 3, over the order
    assert _timeouts(_with("hold", StepRetry(attempts=1)), 5) == [fail]
    assert _timeouts(_with("hold", StepRetry(attempts=5)), 6) == [retry] * 4 + [fail]


def test_a_step_declaring_its_backoff_waits_its_own_and_a_resubmit_counts_afresh() -> None:
    wf = _with("hold", StepRetry(attempts=2, backoff=(timedelta(seconds=10),
                                                      timedelta(seconds=15))))
    store = FakeOrderStore()
    state = claim(accepted(store, "o-1", T0, wf), "s1", T0, wf)
    state.outbox = []  # its request went out
    assert state.complete_by is not None
    due = state.complete_by + timedelta(seconds=1)
    decision = supervise(state, due, POLICY, wf)
    assert decision is not None and decision.kind is DecisionKind.RETRY
    assert decision.state.complete_by == due + timedelta(seconds=10) + POLICY.pending_grace
    assert decision.state.step("hold").timeouts == 1
    retried = claim(decision.state, "s1", due, wf)
    retried.outbox = []
    failed = supervise(retried, due + timedelta(hours=1), POLICY, wf)
    assert failed is not None and failed.kind is DecisionKind.FAIL
    # Once failed, undone and resubmitted, its attempts count from nothing again.
    settled = failed.state
    settled.compensation = settled.compensation.__class__("Done")
    again = resubmit(settled, due + timedelta(hours=2), POLICY.pending_grace, force=True)
    assert again.step("hold").timeouts == 0


def test_a_status_the_step_declares_transient_is_asked_again_within_its_time() -> None:
    clock = FakeClock(T0)
    wf = _with("take", StepRetry(transient=frozenset({409})))
    store = FakeOrderStore()
    in_flight(store, "o-1", "take", clock.now, workflow=wf)
    script = Script(clock, PermanentServiceError("take: HTTP 409 busy", 409), {"id": "t-1"})
    reply = Agent(name="beta", client=script,  # type: ignore[arg-type]
                  policy=AgentRetryPolicy(0.1, 1, 5), breaker=CircuitBreaker("beta", 100, 1),
                  clock=clock, check=RequestCheck(store, Registry.of([wf]), FakeAlertStore()),
                  sleep=lambda s: clock.advance(seconds=s)).handle(request(clock))
    assert reply is not None and reply.outcome is ReplyOutcome.OK and len(script.calls) == 2
    # Not declared: the contract's refusal, at once.
    script = Script(clock, PermanentServiceError("take: HTTP 409 busy", 409))
    store = FakeOrderStore()
    in_flight(store, "o-1", "take", clock.now, workflow=FLOW)
    reply = Agent(name="beta", client=script,  # type: ignore[arg-type]
                  policy=AgentRetryPolicy(0.1, 1, 5), breaker=CircuitBreaker("beta", 100, 1),
                  clock=clock, check=RequestCheck(store, Registry.of([FLOW]), FakeAlertStore()),
                  sleep=lambda s: clock.advance(seconds=s)).handle(request(clock))
    assert reply is not None and reply.outcome is ReplyOutcome.PERMANENT_ERROR


def test_a_steps_own_timeouts_do_not_use_up_the_others_failure_threshold() -> None:
    wf = _with("hold", StepRetry(attempts=5))
    store = FakeOrderStore()
    state = claim(accepted(store, "o-1", T0, wf), "s1", T0, wf)
    state.outbox = []
    state.failure_count, state.step("hold").timeouts = 3, 3  # "hold" timed out 3 times
    state.step("hold").status = StepStatus.COMPLETED  # and then was done
    take = state.step("take")
    take.status, take.attempt, take.work_key = StepStatus.RUNNING, 1, "o-1.take.do"
    take.complete_by = state.complete_by = T0 + timedelta(seconds=30)
    decision = supervise(state, T0 + timedelta(minutes=1), POLICY, wf)
    assert decision is not None and decision.kind is DecisionKind.RETRY  # its first timeout


def test_a_long_backoff_is_held_to_its_longest_however_many_failures() -> None:
    retry = StepRetry(attempts=100, backoff=(timedelta(seconds=1), timedelta(hours=1)))
    assert retry.delay(100) == timedelta(hours=1)
    assert exponential_backoff(timedelta(days=1), timedelta(days=2))(10_000) == timedelta(days=2)


@pytest.mark.parametrize("bad", [
    {"attempts": 0}, {"attempts": True}, {"attempts": 2.5}, {"attempts": 101},
    {"backoff": (timedelta(seconds=1), timedelta(days=8))},
    {"backoff": (timedelta(0), timedelta(1))},
    {"backoff": (timedelta(seconds=5), timedelta(seconds=1))},
    {"transient": frozenset({500})}, {"transient": frozenset({429})}])
def test_a_policy_that_cannot_work_is_refused_when_declared(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="StepRetry"):
        StepRetry(**bad)  # type: ignore[arg-type]
