"""A service that is the user's own code, held to what an HTTP service's client is held to, and
run by an Agent that keeps every guarantee it keeps for HTTP: the request checked against the
record before the code runs, retries within complete-by honouring a retry-after, refusals, the
result handed on, the earlier results and the undo's result given to the code."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.adapters.code_service import CodeServiceClient
from shared.adapters.remote_service import PermanentServiceError, TransientServiceError
from shared.circuit_breaker import CircuitBreaker
from shared.domain.messages import Action, AgentRequest, new_work_key, undo_key
from shared.domain.services import Call, CodeService, Refuse, Retry
from shared.domain.workflow import Registry
from shared.handlers.agent import Agent, AgentRetryPolicy, RequestCheck
from tests.conftest import FakeClock
from tests.fakes import FakeAlertStore, FakeOrderStore, a_call, in_flight
from tests.workflow import FLOW


class Declined(Exception):
    pass


def client(op: Any) -> CodeServiceClient:
    return CodeServiceClient(CodeService("beta", operations={"take": op}, settings=("BetaUrl",),
                                         permanent=(Declined,)), {"BetaUrl": "https://x"})


def raising(e: BaseException) -> Any:
    def op(call: Call) -> Any:
        raise e
    return op


@pytest.mark.parametrize(("raised", "kind"), [
    (Retry("busy", retry_after=3), TransientServiceError),
    (Refuse("no such card"), PermanentServiceError),
    (Declined("card declined"), PermanentServiceError),  # declared permanent
    (KeyError("boom"), TransientServiceError),  # anything else: worth another try
])
def test_what_the_code_raises_is_sorted_into_transient_and_permanent(
        raised: BaseException, kind: type[Exception]) -> None:
    with pytest.raises(kind) as caught:
        client(raising(raised)).call(a_call(), 5)
    if isinstance(raised, Retry):
        assert caught.value.retry_after == 3  # type: ignore[attr-defined]
    if isinstance(raised, Declined):
        assert "Declined: card declined" in str(caught.value)


def test_the_code_gets_its_settings_and_an_answer_that_is_no_object_is_asked_again() -> None:
    seen: list[Call] = []

    def op(call: Call) -> Any:
        seen.append(call)
        return ["not", "an", "object"]

    with pytest.raises(TransientServiceError, match="not a JSON object"):
        client(op).call(a_call(), 5)
    assert seen[0].settings == {"BetaUrl": "https://x"}


def test_an_agent_runs_the_code_with_the_results_and_hands_back_its_answer() -> None:
    clock = FakeClock()
    calls: list[Call] = []
    left: list[float] = []

    def take(call: Call) -> dict[str, Any]:
        calls.append(call)
        left.append(call.time_left())
        if len(calls) == 1:
            raise Retry("429", retry_after=4)
        return {"taken": call.input["order_id"], "after": dict(call.results)}

    store = FakeOrderStore()
    in_flight(store, "o-1", "take", clock.now)
    store.states["o-1"].step("hold").result = {"id": "hold-1"}
    agent = Agent(name="beta", client=CodeServiceClient(
        CodeService("beta", operations={"take": take}), {}),
        policy=AgentRetryPolicy(0.1, 1, 5), breaker=CircuitBreaker("beta", 100, 1),
        clock=clock, check=RequestCheck(store, Registry.of([FLOW]), FakeAlertStore()),
        sleep=lambda s: clock.advance(seconds=s))
    work = new_work_key("o-1", "take")
    reply = agent.handle(AgentRequest(
        order_id="o-1", step="take", action=Action.DO, operation="take", attempt=1,
        complete_by=clock.now + timedelta(seconds=30), idempotency_key=work, order={},
        outbox_seq=1).to_json())
    assert reply is not None and reply.outcome.value == "ok"
    assert reply.result == {"taken": "o-1", "after": {"hold": {"id": "hold-1"}}}
    assert [c.key for c in calls] == [work, work]  # the same key on every attempt
    assert left[0] - left[1] >= 4  # its retry-after waited out
    # A request the record does not show in flight: the code never runs.
    forged = AgentRequest(
        order_id="o-1", step="take", action=Action.UNDO, operation="give_back", attempt=2,
        complete_by=clock.now + timedelta(seconds=30), idempotency_key=undo_key(work),
        compensates=work, order={})
    assert agent.handle(forged.to_json()) is None and len(calls) == 2
