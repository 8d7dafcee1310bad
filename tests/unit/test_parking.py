"""Parking (StepRetry.park, NeedsPerson): a step whose service needs a person parks the order,
saying what is needed; an operator resumes it from that step under the same key, or cancels
it. The search over it is the model test's (operator_resumes_a_parked_order)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.code_service import CodeServiceClient
from shared.adapters.remote_service import NeedsPersonError, PermanentServiceError
from shared.circuit_breaker import CircuitBreaker
from shared.domain.alerts import AlertKind
from shared.domain.cancellation import cancel
from shared.domain.effects import Forget, RaiseAlert, SendCommand, SendStatus
from shared.domain.messages import Action, AgentReply, ReplyOutcome
from shared.domain.parking import NotParked, resume_parked
from shared.domain.services import CodeService, NeedsPerson
from shared.domain.state import CompensationState, ProcessState, StepStatus, schema_of
from shared.domain.step_policy import StepRetry
from shared.domain.transitions import apply_reply, begin_compensation, claim
from shared.domain.workflow import Registry, Workflow
from shared.handlers.agent import Agent, AgentRetryPolicy, RequestCheck
from tests.conftest import FakeClock
from tests.fakes import FakeAlertStore, FakeOrderStore, a_call, accepted, in_flight
from tests.unit.test_agent import Script, request
from tests.workflow import FLOW

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
GRACE = timedelta(seconds=30)
NEEDS = "the customer must confirm the payment"
WF: Workflow = dataclasses.replace(FLOW, steps=tuple(
    dataclasses.replace(s, retry=StepRetry(park={402: NEEDS})) if s.name == "take" else s
    for s in FLOW.steps))


def _parked() -> tuple[FakeOrderStore, object]:
    store = FakeOrderStore()
    order = accepted(store, "o-1", T0, WF)
    order.reply_to = "status-o-1"  # the submitter named a queue: it is told
    state = claim(order, "s1", T0, WF)
    hold = state.step("hold")
    state = apply_reply(state, AgentReply(order_id="o-1", step="hold", action=Action.DO,
                                          attempt=1, outcome=ReplyOutcome.OK, result={"id": 1},
                                          token=hold.token), "s1", T0, WF)
    take = state.step("take")
    state = apply_reply(state, AgentReply(
        order_id="o-1", step="take", action=Action.DO, attempt=1,
        outcome=ReplyOutcome.PERMANENT_ERROR, error="take: HTTP 402 <provider's own text>",
        needs=NEEDS, token=take.token), "s1", T0, WF)
    return store, state


def test_a_step_that_needs_a_person_parks_the_order_saying_what_and_nothing_is_undone() -> None:
    _, state = _parked()
    assert state.process_state is ProcessState.PARKED  # type: ignore[attr-defined]
    assert state.is_settled and schema_of(state) == 5  # type: ignore[attr-defined]
    take = state.step("take")  # type: ignore[attr-defined]
    # In doubt: a copy of its request, or the person's act, may have done the work yet.
    assert (take.status, take.in_doubt, take.work_key) == (
        StepStatus.NOT_STARTED, True, "o-1.take.do")
    assert state.step("hold").status is StepStatus.COMPLETED  # type: ignore[attr-defined]
    assert state.compensation is None  # type: ignore[attr-defined]
    outbox = state.outbox  # type: ignore[attr-defined]
    (alert,) = [e for e in outbox if isinstance(e, RaiseAlert)]
    assert alert.alert is AlertKind.ORDER_PARKED and alert.reason == NEEDS
    # The submitter is told what is needed in the step's words, never the provider's.
    (status,) = [e for e in outbox if isinstance(e, SendStatus) and e.event == "parked"]
    assert status.detail == NEEDS
    assert any(isinstance(e, Forget) for e in outbox)  # out of the Supervisor's way


def test_a_resumed_order_goes_on_from_its_step_under_the_same_key() -> None:
    _, state = _parked()
    resumed = resume_parked(state, T0 + timedelta(hours=1), GRACE, "customer confirmed",  # type: ignore[arg-type]
                            by="ada")
    assert resumed.process_state is ProcessState.PENDING and resumed.index_key is None
    assert [e.command for e in resumed.outbox if isinstance(e, SendCommand)] == ["start"]
    assert resumed.timeline[-1]["by"] == "ada"
    again = claim(resumed, "s1", T0 + timedelta(hours=1), WF)
    take = again.step("take")
    assert (take.status, take.attempt, take.work_key) == (StepStatus.RUNNING, 2, "o-1.take.do")
    with pytest.raises(NotParked, match="Processing, not Parked"):
        resume_parked(again, T0, GRACE, "")


def test_a_parked_order_cancelled_learns_its_step_first_then_undoes_and_is_filed_again() -> None:
    _, state = _parked()
    cancelled = cancel(state, T0 + timedelta(hours=1), GRACE, "customer gave up")  # type: ignore[arg-type]
    assert cancelled.process_state is ProcessState.CANCELLED
    assert cancelled.compensation is CompensationState.PENDING and cancelled.index_key is None
    undoing = begin_compensation(cancelled, "s1", T0 + timedelta(hours=1), WF)
    # The parked step is asked again under its key before anything is undone: the person's
    # act may have done it.
    take = undoing.step("take")
    assert (take.status, take.work_key) == (StepStatus.LEARNING, "o-1.take.do")


def _agent(clock: FakeClock, script: Script, action: Action = Action.DO) -> Agent:
    store = FakeOrderStore()
    in_flight(store, "o-1", "take", clock.now, action=action.value, workflow=WF)
    return Agent(name="beta", client=script,  # type: ignore[arg-type]
                 policy=AgentRetryPolicy(0.1, 1, 5), breaker=CircuitBreaker("beta", 100, 1),
                 clock=clock, check=RequestCheck(store, Registry.of([WF]), FakeAlertStore()),
                 sleep=lambda s: clock.advance(seconds=s))


def test_the_agent_says_what_is_needed_for_a_declared_status_or_a_code_services_word() -> None:
    clock = FakeClock(T0)
    reply = _agent(clock, Script(clock, PermanentServiceError("take: HTTP 402 x", 402))).handle(
        request(clock))
    assert reply is not None and reply.needs == NEEDS
    reply = _agent(clock, Script(clock, NeedsPersonError("take: 3DS", "confirm 3DS"))).handle(
        request(clock))
    assert reply is not None and reply.needs == "confirm 3DS"
    # An undo refused with that status is a refusal of the undo, nothing to park.
    reply = _agent(clock, Script(clock, PermanentServiceError("give_back: HTTP 402", 402)),
                   Action.UNDO).handle(request(clock, action=Action.UNDO))
    assert reply is not None and reply.needs is None
    # Another 4xx is the contract's refusal.
    reply = _agent(clock, Script(clock, PermanentServiceError("take: HTTP 422", 422))).handle(
        request(clock))
    assert reply is not None and reply.needs is None


def test_a_code_service_raising_needs_person_is_told_apart_from_a_refusal() -> None:
    def take(call: object) -> dict[str, object]:
        raise NeedsPerson("the customer must confirm 3-D Secure")

    client = CodeServiceClient(CodeService("beta", {"take": take}), {})
    with pytest.raises(NeedsPersonError) as e:
        client.call(a_call(), 5)
    assert e.value.needs == "the customer must confirm 3-D Secure"

    # Its words go to the submitter: made inert, one line, a sentence long; none, a default.
    def odd(call: object) -> dict[str, object]:
        raise NeedsPerson("confirm\n\x1b[2J " + "x" * 500)

    def silent(call: object) -> dict[str, object]:
        raise NeedsPerson()

    with pytest.raises(NeedsPersonError) as e:
        CodeServiceClient(CodeService("beta", {"take": odd}), {}).call(a_call(), 5)
    assert e.value.needs.startswith("confirm \\x1b[2J x") and len(e.value.needs) == 200
    with pytest.raises(NeedsPersonError) as e:
        CodeServiceClient(CodeService("beta", {"take": silent}), {}).call(a_call(), 5)
    assert e.value.needs == "a person must act before take can be done"


def test_a_park_declaration_that_cannot_work_is_refused() -> None:
    with pytest.raises(ValueError, match="say what a person must do"):
        StepRetry(park={402: " "})
    with pytest.raises(ValueError, match="both transient and parked"):
        StepRetry(transient=frozenset({402}), park={402: "x"})
