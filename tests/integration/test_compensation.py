"""Compensation through the real Scheduler, Agents and simulated services (local host), on the
engine's test workflow (tests/workflow.py: hold, take, send)."""

from __future__ import annotations

import json
from typing import Any

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


def test_a_refused_step_is_not_undone_and_the_one_before_is_undone_exactly_once(
        run_host: Any) -> None:
    # The simulated services refuse a do for good by its key, the same every time (as a card
    # declined stays declined): at this rate, o-1's "take" is refused and its "hold" is not.
    h: RunningHost = run_host(workflows=TEST_FLOW, only=PIPELINE, SimPermanentErrorRate="0.4")
    function("intake")(msg=sb_message(order("o-1"), message_id="o-1"))
    final = wait_until(lambda: settled(h, "o-1"), timeout=30, message="order settled")
    assert isinstance(final, dict)
    assert final["ProcessState"] == "Error" and final["Compensation"] == "Done"
    assert "simulated permanent fault" in final["LastError"]
    steps = {s["name"]: s for s in json.loads(final["Steps"])}
    assert steps["hold"]["status"] == "compensated"
    # Undone by the answer its work was given, under the undo key recorded when first sent.
    assert steps["hold"]["result"] == {"status": "applied", "key": "o-1.hold.do"}
    assert steps["hold"]["undo_key"] == undo_key(new_work_key("o-1", "hold"))
    # Refused for good, it did nothing: it is not undone, and keeps no result.
    assert steps["take"]["status"] == "failed"
    assert "result" not in steps["take"] and "undo_key" not in steps["take"]
    assert steps["send"]["status"] == "not_started"
    # Its service was asked once (the do), never to undo it: it holds no effect of the order.
    assert h.host.stats.invocations["beta_agent"] == 1
    effects = {(e["PartitionKey"], e["RowKey"]): e["Status"]
               for e in entities(h.env["SimulatorTableName"])}
    assert effects == {("alpha", "o-1.hold.do"): "undone"}
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
