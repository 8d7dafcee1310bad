"""Compensation through the real Scheduler, Agents and simulated services (local host), on the
engine's test workflow (tests/workflow.py: hold, take, send)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from shared.domain.messages import Action, AgentRequest, new_work_key, undo_key
from tests.conftest import wait_until
from tests.integration.conftest import RunningHost
from tests.integration.helpers import (
    enqueue,
    entities,
    function,
    index_entries,
    order,
    sb_message,
)
from tests.workflow import REGISTRY as TEST_FLOW

PIPELINE = {"scheduler_commands", "scheduler_replies", "alpha_agent", "beta_agent",
            "gamma_agent", "simulated_service"}


def state(h: RunningHost, order_id: str) -> dict[str, Any] | None:
    rows = entities(h.env["StateTableName"], "PartitionKey eq @p and RowKey eq 'state'",
                    p=order_id)
    return rows[0] if rows else None


def settled(h: RunningHost, order_id: str) -> dict[str, Any] | None:
    s = state(h, order_id)
    done = s and (s["ProcessState"] == "Processed" or s.get("Compensation") in ("Done", "Failed"))
    return s if done else None


def test_a_refused_step_undoes_the_one_before_exactly_once(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=PIPELINE)
    function("intake")(msg=sb_message(order("o-1"), message_id="o-1"))
    # Refuse step "take" by voiding its key at the service first (an Agent would not: the app
    # never asked): the service then answers 409 (permanent).
    work = new_work_key("o-1", "take")
    voided = httpx.post(f"http://127.0.0.1:{h.port}/api/sim/beta/give_back",
                        json={"order_id": "o-1", "compensates": work}, timeout=10,
                        headers={"Idempotency-Key": undo_key(work),
                                 "x-functions-key": h.host.keys.function})
    assert voided.json()["status"] == "voided"
    final = wait_until(lambda: settled(h, "o-1"), timeout=30, message="order settled")
    assert isinstance(final, dict)
    assert final["ProcessState"] == "Error" and final["Compensation"] == "Done"
    steps = {s["name"]: s for s in json.loads(final["Steps"])}
    assert steps["hold"]["status"] == "compensated"
    assert steps["take"]["status"] == "compensated"  # its key voided, again
    assert steps["send"]["status"] == "not_started"
    effects = {(e["PartitionKey"], e["RowKey"]): e["Status"]
               for e in entities(h.env["SimulatorTableName"])}
    assert effects == {("alpha", "o-1.hold.do"): "undone", ("beta", "o-1.take.do"): "voided"}
    # A duplicate of the undo request of "hold" is harmless: the Agent sees on the record that
    # the undo is done and drops it, without calling the service or replying.
    duplicate = AgentRequest(
        order_id="o-1", step="hold", action=Action.UNDO, operation="release",
        attempt=2, complete_by=h.container.scheduler._clock().replace(year=2100),
        idempotency_key=undo_key(new_work_key("o-1", "hold")),
        compensates=new_work_key("o-1", "hold"),
        order={}).to_json()
    assert h.container.agents["alpha"].handle(duplicate) is None
    agents_before = h.host.stats.invocations["alpha_agent"]
    enqueue(h.env["AlphaRequestsQueueName"], duplicate)
    wait_until(lambda: h.host.stats.invocations["alpha_agent"] > agents_before,
               timeout=10, message="the duplicate to be handled")
    assert state(h, "o-1") == final
    assert {(e["PartitionKey"], e["RowKey"]): e["Status"]
            for e in entities(h.env["SimulatorTableName"])} == effects
    assert index_entries(h.env) == []
