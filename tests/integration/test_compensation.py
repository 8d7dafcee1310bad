"""Compensation through the real Scheduler, Agents and simulated services (local host)."""

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

PIPELINE = {"scheduler_commands", "scheduler_replies", "inventory_agent", "payment_agent",
            "shipping_agent", "simulated_service"}


def state(h: RunningHost, order_id: str) -> dict[str, Any] | None:
    rows = entities(h.env["StateTableName"], "PartitionKey eq @p and RowKey eq 'state'",
                    p=order_id)
    return rows[0] if rows else None


def settled(h: RunningHost, order_id: str) -> dict[str, Any] | None:
    s = state(h, order_id)
    done = s and (s["ProcessState"] == "Processed" or s.get("Compensation") in ("Done", "Failed"))
    return s if done else None


def test_refused_payment_undoes_the_reservation_exactly_once(run_host: Any) -> None:
    h: RunningHost = run_host(only=PIPELINE)
    function("intake")(msg=sb_message(order("o-1"), message_id="o-1"))
    # Refuse the charge by voiding its key at the service first (an Agent would not: the app
    # never asked): the service then answers 409 (permanent).
    work = new_work_key("o-1", "charge_payment")
    voided = httpx.post(f"http://127.0.0.1:{h.port}/api/sim/payment/refund",
                        json={"order_id": "o-1", "compensates": work}, timeout=10,
                        headers={"Idempotency-Key": undo_key(work),
                                 "x-functions-key": h.host.keys.function})
    assert voided.json()["status"] == "voided"
    final = wait_until(lambda: settled(h, "o-1"), timeout=30, message="order settled")
    assert isinstance(final, dict)
    assert final["ProcessState"] == "Error" and final["Compensation"] == "Done"
    steps = {s["name"]: s for s in json.loads(final["Steps"])}
    assert steps["reserve_inventory"]["status"] == "compensated"
    assert steps["charge_payment"]["status"] == "compensated"  # its key voided, again
    assert steps["arrange_shipping"]["status"] == "not_started"
    effects = {(e["PartitionKey"], e["RowKey"]): e["Status"]
               for e in entities(h.env["SimulatorTableName"])}
    assert effects == {("inventory", "o-1.reserve_inventory.do"): "undone",
                       ("payment", "o-1.charge_payment.do"): "voided"}
    # A duplicate of the release request is harmless: the Agent sees on the record that the
    # release is done and drops it, without calling the service or replying.
    duplicate = AgentRequest(
        order_id="o-1", step="reserve_inventory", action=Action.UNDO, operation="release",
        attempt=2, complete_by=h.container.scheduler._clock().replace(year=2100),
        idempotency_key=undo_key(new_work_key("o-1", "reserve_inventory")),
        compensates=new_work_key("o-1", "reserve_inventory"),
        order={}).to_json()
    assert h.container.agents["inventory"].handle(duplicate) is None
    agents_before = h.host.stats.invocations["inventory_agent"]
    enqueue(h.env["InventoryRequestsQueueName"], duplicate)
    wait_until(lambda: h.host.stats.invocations["inventory_agent"] > agents_before,
               timeout=10, message="the duplicate to be handled")
    assert state(h, "o-1") == final
    assert {(e["PartitionKey"], e["RowKey"]): e["Status"]
            for e in entities(h.env["SimulatorTableName"])} == effects
    assert index_entries(h.env) == []
