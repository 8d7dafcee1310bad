"""An Agent does only what the order's record says the Scheduler asked for now. Each request
an attacker could put on an Agent's queue (or send through the host's admin API) is refused
without calling the service; each request the app itself sent, however late, is not reported."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.circuit_breaker import CircuitBreaker
from shared.domain.alerts import AlertKind
from shared.domain.messages import Action, AgentRequest, new_work_key, undo_key
from shared.domain.provenance import Verdict, judge
from shared.domain.services import Call
from shared.domain.state import OrderState
from shared.domain.workflow import Registry
from shared.handlers.agent import Agent, AgentRetryPolicy, RequestCheck
from tests.conftest import FakeClock
from tests.fakes import FakeAlertStore, FakeOrderStore, in_flight
from tests.workflow import FLOW

CLOCK = FakeClock()


def req(action: str = "do", attempt: int = 1, step: str = "take", key: str | None = None,
        operation: str | None = None, order_id: str = "o-1", **extra: Any) -> AgentRequest:
    work = new_work_key(order_id, step)
    declared = {s.name: s for s in FLOW.steps}
    return AgentRequest(
        order_id=order_id, step=step, action=Action(action),
        operation=operation or (declared[step].operation_for(action) if step in declared
                                else "x"),
        attempt=attempt, complete_by=CLOCK.now + timedelta(seconds=30),
        idempotency_key=key or (work if action == "do" else undo_key(work)),
        order={"order_id": order_id, "amount": "0.01"}, **extra)


def record(action: str = "do", attempt: int = 1, generation: int = 0,
           token: str | None = None) -> OrderState:
    store = FakeOrderStore()
    return in_flight(store, "o-1", "take", CLOCK.now, action=action, attempt=attempt,
                     generation=generation, token=token)


def _settled() -> OrderState:
    """o-1 Processed: every step done, nothing of it ever undone (the review's refund)."""
    from shared.domain.state import ProcessState, StepStatus

    store = FakeOrderStore()
    state = in_flight(store, "o-1", "take", CLOCK.now)
    state.process_state, state.complete_by = ProcessState.PROCESSED, None
    for s in state.steps:
        s.status, s.complete_by = StepStatus.COMPLETED, None
    return store.save(state)


@pytest.mark.parametrize("action", ["do", "undo"])
def test_the_request_the_record_shows_in_flight_is_done(action: str) -> None:
    assert judge(record(action), req(action), "beta", FLOW).verdict is Verdict.IN_FLIGHT
    # A newer release's order (no workflow here): its record alone decides.
    assert judge(record(action), req(action), "beta", None).verdict is Verdict.IN_FLIGHT


def _kept_through_a_forced_resubmit(settled: bool) -> OrderState:
    """o-1 resubmitted with force: the step's work stood, so it is asked again under the key of
    generation 0, and the undo requests of that generation may still be queued."""
    from shared.domain.state import ProcessState, StepStatus

    store = FakeOrderStore()
    state = in_flight(store, "o-1", "take", CLOCK.now, generation=1)
    state.step("take").work_key = new_work_key("o-1", "take")
    # Its do at attempt 1, undos at 2 and 3 (refused: compensation failed), then after the
    # resubmit its do again at 4: attempts count on across generations.
    state.step("take").attempt = 4
    if settled:
        state.process_state, state.complete_by = ProcessState.PROCESSED, None
        for s in state.steps:
            s.status, s.complete_by = StepStatus.COMPLETED, None
    return store.save(state)


FORGERIES = {
    "no such order": (record(), req(order_id="o-404")),
    "no such step": (record(), req(step="mint", operation="mint")),
    "another service's step": (record(), req(step="hold")),
    "another operation": (record(), req(operation="give_back")),
    "an undo of a processed order": (record("do"), req("undo", attempt=2)),
    "an undo of work never compensating": (record("do", attempt=3), req("undo", attempt=1)),
    "a key of another order": (record(), req(key="o-2.take.do")),
    "a key it made up": (record(), req(key="anything")),
    "an undo naming other work": (record("undo"), req("undo", compensates="o-2.take.do")),
    "an attempt never sent": (record(attempt=1), req(attempt=2)),
    "a do while the step is undone": (record("undo", attempt=2), req("do", attempt=3)),
    "the undo of a settled order's work": (_settled(), req("undo")),
    "a request without its attempt's token": (record(token="t-1"), req()),
    "a request with another attempt's token": (record(token="t-1"), req(token="t-0")),
    "an undo of work kept through a forced resubmit, at an attempt never reached": (
        _kept_through_a_forced_resubmit(True), req("undo", attempt=99)),
    "a copy given more time than the step": (record(), req().model_copy(
        update={"complete_by": CLOCK.now + timedelta(days=30)})),
}


def test_the_request_carrying_its_attempts_token_is_done() -> None:
    assert judge(record(token="t-1"), req(token="t-1"), "beta", FLOW).verdict \
        is Verdict.IN_FLIGHT


@pytest.mark.parametrize("name", FORGERIES)
def test_a_request_the_app_never_sent_is_forged(name: str) -> None:
    state, forged = FORGERIES[name]
    if name == "no such order":
        state = None  # type: ignore[assignment]
    judgement = judge(state, forged, "beta", FLOW)
    assert judgement.verdict is Verdict.FORGED, judgement
    assert judgement.reason


STALE = {
    "a late undo of work kept through a forced resubmit, the step running again": (
        _kept_through_a_forced_resubmit(False), req("undo", attempt=1)),
    "a late undo of work kept through a forced resubmit, the order processed": (
        _kept_through_a_forced_resubmit(True), req("undo", attempt=3)),
    "an earlier attempt of the step": (record(attempt=3), req(attempt=2)),
    "the do of a step now being undone": (record("undo", attempt=2), req("do", attempt=1)),
    "a request of the order before it was resubmitted": (record(generation=1), req()),
}


@pytest.mark.parametrize("name", STALE)
def test_a_request_the_app_sent_for_a_moment_gone_by_is_stale(name: str) -> None:
    state, late = STALE[name]
    assert judge(state, late, "beta", FLOW).verdict is Verdict.STALE


class Service:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def call(self, c: Call, timeout: float) -> dict[str, Any]:
        body = c.http_body()
        self.calls.append(body)
        return {"status": "applied"}


def agent_over(store: FakeOrderStore, alerts: FakeAlertStore, service: Service) -> Agent:
    return Agent(name="beta", client=service,  # type: ignore[arg-type]
                 policy=AgentRetryPolicy(0.1, 1, 5), breaker=CircuitBreaker("beta", 100, 1),
                 clock=CLOCK, check=RequestCheck(store, Registry.of([FLOW]), alerts),
                 sleep=lambda s: None)


def test_a_forged_request_is_not_done_and_the_operator_is_told_once() -> None:
    store, alerts, service = FakeOrderStore(), FakeAlertStore(), Service()
    in_flight(store, "o-1", "take", CLOCK.now)  # processing; nothing compensating
    agent = agent_over(store, alerts, service)
    refund = req("undo", attempt=2).to_json()
    assert agent.handle(refund) is None
    assert agent.handle(refund) is None  # the same message again
    assert service.calls == []
    (alert,) = alerts.of("o-1", AlertKind.REQUEST_REFUSED)
    assert "never sent" in alert.reason and alert.step == "take"


def test_a_forged_requests_fields_reach_the_alert_inert() -> None:
    """Its order id, step and key are the sender's: what a terminal would act on in them (an
    escape sequence, a bidi override, a line break) is written out in the alert, not kept."""
    from shared.domain.text import acts

    store, alerts, service = FakeOrderStore(), FakeAlertStore(), Service()
    hostile = "\x1b]52;c;aGk=\x07\u202e\n"
    forged = req(order_id=f"o{hostile}", step=f"take{hostile}", key=f"k{hostile}")
    assert agent_over(store, alerts, service).handle(forged.to_json()) is None
    (alert,) = alerts.alerts.values()
    for field in (alert.order_id, alert.step or "", alert.reason):
        assert not any(map(acts, field)), field
    assert alert.order_id == "o\\x1b]52;c;aGk=\\x07\\u202e\\x0a" and service.calls == []


def test_a_stale_request_is_dropped_without_an_alert() -> None:
    store, alerts, service = FakeOrderStore(), FakeAlertStore(), Service()
    in_flight(store, "o-1", "take", CLOCK.now, attempt=2)
    assert agent_over(store, alerts, service).handle(req(attempt=1).to_json()) is None
    assert service.calls == [] and alerts.alerts == {}


def test_the_service_is_sent_the_order_as_stored_not_as_the_request_carries_it() -> None:
    store, alerts, service = FakeOrderStore(), FakeAlertStore(), Service()
    in_flight(store, "o-1", "take", CLOCK.now)
    reply = agent_over(store, alerts, service).handle(req().to_json())
    assert reply is not None and reply.outcome == "ok"
    (body,) = service.calls
    assert "amount" not in body["order"] and body["order"]["customer_id"] == "c"


def test_a_reply_the_app_never_asked_for_is_refused_and_the_operator_told_once() -> None:
    """The reply side of the same attack: a made-up 'done' for a step in flight would have the
    order go on without the work. Without the attempt's token it moves nothing; the real reply,
    echoing the token, still does."""
    from shared.domain.alerts import AlertKind
    from shared.domain.messages import AgentReply, ReplyOutcome, SchedulerCommand
    from shared.handlers.relay import EffectRelay
    from shared.handlers.scheduler import Outcome, Queues, Scheduler
    from tests.fakes import FakeQueues, accepted

    clock, store, alerts = FakeClock(), FakeOrderStore(), FakeAlertStore()
    queues = FakeQueues(clock)
    registry = Registry.of([FLOW])
    relay = EffectRelay(store=store, sender=queues, alerts=alerts, workflows=registry,
                        agent_queues={"alpha": "a", "beta": "b", "gamma": "c"},
                        scheduler_queue="cmd", clock=clock)
    scheduler = Scheduler(instance_id="s1", store=store, relay=relay, workflows=registry,
                          clock=clock, queues=Queues(queues, "cmd", "replies"))
    accepted(store, "o-1", clock.now)
    scheduler.handle_command(SchedulerCommand(order_id="o-1", kind="start").to_json())
    (sent,) = queues.visible("a")
    request = AgentRequest.model_validate_json(sent.body)
    assert request.token
    made_up = AgentReply(order_id="o-1", step="hold", action=Action.DO, attempt=1,
                         outcome=ReplyOutcome.OK, outbox_seq=request.outbox_seq)
    for _ in range(2):  # a replay of the same message
        assert scheduler.handle_reply(made_up.to_json()).outcome is Outcome.IGNORED
    assert store.states["o-1"].step("hold").status.value == "running"
    assert [a.kind for a in alerts.alerts.values()] == [AlertKind.REQUEST_REFUSED]
    real = made_up.model_copy(update={"token": request.token})
    assert scheduler.handle_reply(real.to_json()).outcome is Outcome.APPLIED
    assert store.states["o-1"].step("hold").status.value == "completed"


def test_a_made_up_command_cannot_drop_an_alert_that_never_went() -> None:
    """The red team's R4: the Supervisor gave an order up, and its OrderFailed alert failed to
    be recorded; a command made up with the outbox's number (a small count anyone can guess)
    was taken as proof that the alert had gone, and the operator never saw it. A command from
    the queue proves nothing: the alert goes with the compensation."""
    from shared.domain.messages import CommandKind, SchedulerCommand
    from shared.domain.state import RetryPolicy, exponential_backoff
    from shared.handlers.relay import EffectRelay
    from shared.handlers.scheduler import Outcome, Queues, Scheduler
    from tests.fakes import FakeQueues, StorageDown, supervisor_over_fakes

    clock, store = FakeClock(), FakeOrderStore()
    down = {"alerts": True}

    def fault(op: str) -> None:
        if down["alerts"] and op == "alerts.raise":
            raise StorageDown("the alerts table")

    alerts = FakeAlertStore(fault=fault)
    policy = RetryPolicy(1, exponential_backoff(timedelta(seconds=1), timedelta(seconds=2)),
                         pending_grace=timedelta(seconds=10), outage_gap=timedelta(days=1))
    supervisor = supervisor_over_fakes(store, clock, policy, alerts=alerts)
    supervisor.tick()  # watching since before the step began
    clock.advance(seconds=1)
    hold = FLOW.step("hold").budget
    in_flight(store, "o-1", "hold", clock.now, budget=hold)
    clock.advance(seconds=hold.total_seconds() + 1)
    assert supervisor.tick().errors == 1  # given up, but its alert was not recorded
    given_up = store.states["o-1"]
    assert given_up.compensation is not None and given_up.compensation.value == "Pending"
    down["alerts"] = False
    queues = FakeQueues(clock)
    relay = EffectRelay(store=store, sender=queues, alerts=alerts,
                        workflows=Registry.of([FLOW]),
                        agent_queues={"alpha": "a", "beta": "b", "gamma": "c"},
                        scheduler_queue="cmd", clock=clock)
    scheduler = Scheduler(instance_id="s1", store=store, relay=relay,
                          workflows=Registry.of([FLOW]), clock=clock,
                          queues=Queues(queues, "cmd", "replies"))
    made_up = SchedulerCommand(kind=CommandKind.COMPENSATE, order_id="o-1",
                               outbox_seq=given_up.outbox_seq)
    assert scheduler.handle_command(made_up.to_json()).outcome is Outcome.APPLIED
    assert [a.kind for a in alerts.of("o-1")] == [AlertKind.ORDER_FAILED]
