"""Agents over HTTP against the simulated services, served by the local host: the engine's
test workflow's (tests/workflow.py), step "take" on service "beta"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from shared.adapters.remote_service import RemoteServiceClient
from shared.circuit_breaker import CircuitBreaker
from shared.domain.messages import Action, AgentRequest, new_work_key, undo_key
from shared.domain.workflow import Registry
from shared.handlers.agent import Agent, AgentRetryPolicy, RequestCheck
from tests.conftest import wait_until
from tests.fakes import FakeAlertStore, FakeOrderStore, a_call, in_flight
from tests.integration.conftest import RunningHost
from tests.integration.helpers import drain_json, enqueue, entities
from tests.workflow import FLOW
from tests.workflow import REGISTRY as TEST_FLOW

SIM_ONLY = {"simulated_service"}


def request(h: RunningHost | None, action: Action = Action.DO, seconds: float = 5,
            attempt: int = 1, order_id: str = "o-1", operation: str = "take") -> str:
    """A request for o-1's step "take", with the order's record showing it in flight (an Agent does
    nothing else: tests/unit/test_provenance.py)."""
    if h is not None:
        in_flight(h.container.store, order_id, "take", datetime.now(UTC),
                  action=action.value, attempt=attempt, workflow=FLOW)
    work = new_work_key(order_id, "take")
    return AgentRequest(
        order_id=order_id, step="take", action=action, operation=operation,
        attempt=attempt, complete_by=datetime.now(UTC) + timedelta(seconds=seconds),
        idempotency_key=undo_key(work) if action is Action.UNDO else work,
        compensates=work if action is Action.UNDO else None,
        order={"order_id": order_id},
    ).to_json()


def effects(h: RunningHost) -> list[dict[str, Any]]:
    return entities(h.env["SimulatorTableName"])


def test_ok_call_replies_and_the_effect_is_recorded_once(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=SIM_ONLY)
    agent = h.container.agents["beta"]
    first = agent.handle(request(h))
    again = agent.handle(request(h, attempt=2))  # a retry of the same step: same key
    assert first is not None and first.outcome == "ok"
    assert again is not None and again.outcome == "ok" and again.result["duplicate"] is True
    (effect,) = effects(h)
    assert (effect["RowKey"], effect["Status"]) == ("o-1.take.do", "applied")


def test_the_agents_function_sends_its_reply_on_its_output_binding_and_none_when_late(
        run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=SIM_ONLY | {"beta_agent"})
    requests = h.env["BetaRequestsQueueName"]
    enqueue(requests, request(h, order_id="o-late", seconds=-1))
    enqueue(requests, request(h, order_id="o-ok"))
    queue = h.container.queues.get_queue_client(requests)
    # Both requests deleted: each invocation, with whatever it sent, is over.
    wait_until(lambda: queue.get_queue_properties().approximate_message_count == 0,
               timeout=20, message="both requests handled")
    (reply,) = drain_json(h.env["AgentResponsesQueueName"])
    assert (reply["order_id"], reply["outcome"], reply["attempt"]) == ("o-ok", "ok", 1)
    assert h.host.stats.invocations["beta_agent"] == 2


def test_a_made_up_undo_of_a_settled_orders_work_is_refused_not_done(
        run_host: Any) -> None:
    """The attack a security review reproduced: with write access to a request queue (or the
    master key's "run a function"), a request the app never sent refunded a Processed order's
    charge. The Agent's function now checks it against the order's record first: nothing is
    undone, nothing is replied, and the operator is told."""
    from shared.domain.state import ProcessState, StepStatus

    h: RunningHost = run_host(workflows=TEST_FLOW, only=SIM_ONLY | {"beta_agent"})
    taken = h.container.agents["beta"].handle(request(h))
    assert taken is not None and taken.outcome == "ok"
    state = h.container.store.get_state("o-1")
    assert state is not None
    state.process_state = ProcessState.PROCESSED  # the order settled
    for step in state.steps:
        step.status, step.complete_by = StepStatus.COMPLETED, None
    state.complete_by = None
    h.container.store.save(state)
    work = new_work_key("o-1", "take")
    forged = AgentRequest(
        order_id="o-1", step="take", action=Action.UNDO, operation="give_back",
        attempt=1, complete_by=datetime.now(UTC) + timedelta(seconds=5),
        idempotency_key=undo_key(work), compensates=work, order={"order_id": "o-1"}).to_json()
    requests = h.env["BetaRequestsQueueName"]
    enqueue(requests, forged)
    queue = h.container.queues.get_queue_client(requests)
    wait_until(lambda: queue.get_queue_properties().approximate_message_count == 0,
               timeout=20, message="the forged request handled")
    assert h.host.stats.invocations["beta_agent"] == 1
    (effect,) = effects(h)
    assert effect["Status"] == "applied"  # the work stands: not undone
    assert drain_json(h.env["AgentResponsesQueueName"]) == []
    (alert,) = entities(h.env["OperatorAlertsTableName"])
    assert (alert["Kind"], alert["OrderID"]) == ("RequestRefused", "o-1")


def test_transient_faults_are_retried_within_the_budget(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=SIM_ONLY, SimTransientErrorRate="0.6",
                              CircuitBreakerFailures="50")
    replies = [h.container.agents["beta"].handle(request(h, order_id=f"o-{i}", seconds=20))
               for i in range(5)]
    assert all(r is not None and r.outcome == "ok" for r in replies)
    assert len(effects(h)) == 5


def test_permanent_fault_replies_with_an_error(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=SIM_ONLY, SimPermanentErrorRate="1")
    r = h.container.agents["beta"].handle(request(h))
    assert r is not None and r.outcome == "permanent_error" and "422" in (r.error or "")
    assert effects(h) == []


def test_expired_request_is_dropped_without_calling_the_service(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=SIM_ONLY)
    assert h.container.agents["beta"].handle(request(h, seconds=-1)) is None
    assert effects(h) == []
    assert h.host.stats.invocations.get("simulated_service", 0) == 0


def test_hung_service_gets_no_late_reply_but_its_late_work_can_be_undone(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=SIM_ONLY, SimHangRate="1",
                              SimHangSeconds="1.5")
    assert h.container.agents["beta"].handle(request(h, seconds=0.5)) is None
    wait_until(lambda: effects(h), timeout=10, message="the hung work to land")
    r = h.container.agents["beta"].handle(request(h, Action.UNDO, operation="give_back"))
    assert r is not None and r.outcome == "ok"
    (effect,) = effects(h)
    assert effect["Status"] == "undone"


def test_an_order_named_to_hang_hangs_once_at_its_service_with_its_work_done(
        run_host: Any) -> None:
    """The hung call does its work and its answer is lost: the retry, sent while that call
    still hangs (as a Supervisor's retry is when the service began the call late), finds the
    work done and answers at once. The step is in doubt once, not once per retry."""
    h: RunningHost = run_host(workflows=TEST_FLOW, only=SIM_ONLY, SimHangSeconds="4",
                              SimPermanentErrorRate="1")
    agent = h.container.agents["beta"]
    # The service's other orders are answered at once (refused: every one is, at this rate).
    other = agent.handle(request(h, order_id="o-other", seconds=0.5))
    assert other is not None and other.outcome == "permanent_error"
    # The named order's fault is its own, not a draw: it hangs, and is never refused.
    assert agent.handle(request(h, order_id="sim-hang-beta-1", seconds=0.5)) is None
    # Done while the call still hangs (for 4 s).
    wait_until(lambda: len(effects(h)) == 1, timeout=2, message="the hung call's work")
    # Given less time than the first call hangs: a second hang would be no answer.
    again = agent.handle(request(h, order_id="sim-hang-beta-1", attempt=2, seconds=2))
    assert again is not None and again.outcome == "ok" and again.result["duplicate"] is True


def test_undo_before_the_work_voids_it(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=SIM_ONLY)
    agent = h.container.agents["beta"]
    undo = agent.handle(request(h, Action.UNDO, operation="give_back"))
    assert undo is not None and undo.outcome == "ok"
    late = agent.handle(request(h))
    assert late is not None and late.outcome == "permanent_error"
    (effect,) = effects(h)
    assert effect["Status"] == "voided"


def test_simulators_are_off_unless_enabled(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=SIM_ONLY, SimulatorsEnabled="false")
    r = httpx.post(f"http://127.0.0.1:{h.port}/api/sim/beta/take", json={},
                   headers={"Idempotency-Key": "k", "x-functions-key": h.host.keys.function})
    assert r.status_code == 404


class _Refusing:
    def __init__(self) -> None:
        self.calls = 0

    def call(self, *a: Any, **k: Any) -> dict[str, Any]:
        from shared.adapters.remote_service import TransientServiceError

        self.calls += 1
        raise TransientServiceError("503")


def test_circuit_breaker_stops_calling_a_service_that_keeps_failing() -> None:
    remote = _Refusing()
    breaker = CircuitBreaker("beta", 3, 60)
    store = FakeOrderStore()
    for oid in ("o-1", "o-2"):
        in_flight(store, oid, "take", datetime.now(UTC), workflow=FLOW)
    agent = Agent(name="beta", client=remote,  # type: ignore[arg-type]
                  policy=AgentRetryPolicy(0.001, 0.002, 1),
                  breaker=breaker, clock=lambda: datetime.now(UTC),
                  check=RequestCheck(store, Registry.of([FLOW]), FakeAlertStore()))
    assert agent.handle(request(None, seconds=0.5)) is None
    assert remote.calls == 3 and breaker.state == "open"
    assert agent.handle(request(None, order_id="o-2", seconds=0.5)) is None
    assert remote.calls == 3  # open: the Agent waited out its budget without calling


@pytest.mark.parametrize(("status", "kind"), [(503, "Transient"), (429, "Transient"),
                                              (400, "Permanent"), (409, "Permanent")])
def test_http_status_is_sorted_into_transient_and_permanent(status: int, kind: str) -> None:
    from shared.adapters import remote_service

    transport = httpx.MockTransport(lambda req: httpx.Response(status, text="x"))
    client = RemoteServiceClient("http://svc", httpx.Client(transport=transport))
    with pytest.raises(getattr(remote_service, f"{kind}ServiceError")):
        client.call(a_call(), 1)
