"""The Agent with a scripted remote service and a clock it moves by sleeping: no network, no
real time. The Azurite and HTTP version is tests/integration/test_agents.py."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from shared.adapters.remote_service import TransientServiceError
from shared.circuit_breaker import CircuitBreaker
from shared.domain.messages import Action, AgentRequest, new_work_key, undo_key
from shared.domain.services import Call
from shared.domain.workflow import Registry
from shared.handlers.agent import Agent, AgentRetryPolicy, RequestCheck
from tests.conftest import FakeClock
from tests.fakes import FakeAlertStore, FakeOrderStore, in_flight
from tests.workflow import FLOW


class Script:
    """Answers calls in order; records when each came."""

    def __init__(self, clock: FakeClock, *answers: Any) -> None:
        self.clock = clock
        self.answers = list(answers)
        self.calls: list[tuple[float, str, dict[str, Any]]] = []
        self.t0 = clock.now

    def call(self, c: Call, timeout: float) -> dict[str, Any]:
        key, body = c.key, c.http_body()
        self.calls.append(((self.clock.now - self.t0).total_seconds(), key, body))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def agent(clock: FakeClock, script: Script, action: Action = Action.DO,
          generation: int = 0) -> Agent:
    """The beta Agent, with o-1's take step in flight as ``action`` at attempt 1."""
    store = FakeOrderStore()
    in_flight(store, "o-1", "take", clock.now, action=action.value, generation=generation)
    return Agent(name="beta", client=script,  # type: ignore[arg-type]
                 policy=AgentRetryPolicy(0.1, 1, 5),
                 breaker=CircuitBreaker("beta", 100, 1), clock=clock,
                 check=RequestCheck(store, Registry.of([FLOW]), FakeAlertStore()),
                 sleep=lambda s: clock.advance(seconds=s))


def request(clock: FakeClock, budget: float = 30, action: Action = Action.DO) -> str:
    work = new_work_key("o-1", "take")
    return AgentRequest(
        order_id="o-1", step="take", action=action,
        operation="take" if action is Action.DO else "give_back", attempt=1,
        complete_by=clock.now + timedelta(seconds=budget),
        idempotency_key=work if action is Action.DO else undo_key(work),
        compensates=work if action is Action.UNDO else None, order={}, outbox_seq=4,
    ).to_json()


def test_retry_after_is_waited_out_within_the_budget() -> None:
    clock = FakeClock()
    script = Script(clock, TransientServiceError("429", retry_after=7), {"status": "applied"})
    reply = agent(clock, script).handle(request(clock))
    assert reply is not None and reply.outcome == "ok" and reply.outbox_seq == 4
    assert script.calls[1][0] >= 7  # not before the service said


def test_retry_after_past_complete_by_gives_up_without_a_reply() -> None:
    clock = FakeClock()
    script = Script(clock, TransientServiceError("503", retry_after=60), {"status": "applied"})
    assert agent(clock, script).handle(request(clock, budget=30)) is None
    assert len(script.calls) == 1


def test_an_undo_names_the_recorded_work_key_and_nothing_else() -> None:
    clock = FakeClock()
    script = Script(clock, {"status": "undone"})
    agent(clock, script, Action.UNDO).handle(request(clock, action=Action.UNDO))
    ((_, key, body),) = script.calls
    assert key == "o-1.take.undo"
    assert body["compensates"] == "o-1.take.do"


def test_an_undo_sent_by_a_release_before_work_keys_names_the_work_its_key_implies() -> None:
    """Before 75e3701 an undo request had no ``compensates``: the Agent read the work off the
    undo's key. Such a request, met during a rolling deployment, must undo that work, not fail
    the compensation ("an undo request must name the work it undoes")."""
    clock = FakeClock()
    script = Script(clock, {"status": "undone"})
    old = {"schema_version": 1, "order_id": "o-1", "step": "take", "action": "undo",
           "operation": "give_back", "attempt": 1,
           "complete_by": (clock.now + timedelta(seconds=30)).isoformat(),
           "idempotency_key": "o-1.take.g2.undo", "order": {}}
    reply = agent(clock, script, Action.UNDO, generation=2).handle(json.dumps(old))
    assert reply is not None and reply.outcome == "ok"
    ((_, key, body),) = script.calls
    assert (key, body["compensates"]) == ("o-1.take.g2.undo",
                                          "o-1.take.g2.do")


def test_the_undo_key_names_its_work_to_an_agent_of_a_release_before_work_keys() -> None:
    """Such an Agent derived the work from the undo's key (key.removesuffix('.undo') + '.do');
    with today's undo key it must arrive at the recorded work key, never '<key>.do.do'."""
    for work in (new_work_key("o-1", "take"), new_work_key("o-1", "send", 3)):
        assert undo_key(work).removesuffix(".undo") + ".do" == work


def nested(depth: int) -> dict[str, Any]:
    inner: list[Any] = []
    answer: dict[str, Any] = {"status": "applied", "detail": inner}
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return answer


def test_an_answer_the_record_cannot_keep_is_refused_at_the_step_as_done_work() -> None:
    """The service did the work and said so (2xx, a JSON object), but its answer holds a lone
    surrogate (no UTF-8 for it), is nested past what a reply's parser takes, or is past the
    step's share of the record: never kept in part, it is refused at the step with the reason,
    and the note in its place says the work was done (the order undoes it: state.py)."""
    big = {"blob": "x" * FLOW.result_budget("take")}
    for answer in ({"status": "applied", "note": "\ud800"}, nested(199), nested(300), big):
        clock = FakeClock()
        reply = agent(clock, Script(clock, answer)).handle(request(clock))
        assert reply is not None and reply.outcome.value == "permanent_error"
        assert reply.result is not None and "omitted" in reply.result
        assert reply.error and ("cannot carry" in reply.error or "bytes of JSON" in reply.error)
        assert type(reply).model_validate_json(reply.to_json()) == reply  # the Scheduler reads it
    clock = FakeClock()
    plain = agent(clock, Script(clock, nested(50))).handle(request(clock))
    assert plain is not None and plain.result == nested(50)  # an ordinary answer passes
