"""The function index: what the Functions host would read from function_app.py."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from typing import Any

import function_app
from localrun.host.index import functions_of
from tests.conftest import ROOT


def index() -> dict[str, tuple[dict[str, Any], ...]]:
    return {f.name: f.bindings for f in functions_of(function_app.app)}


def trigger(name: str) -> dict[str, Any]:
    (t,) = [b for b in index()[name] if b["type"].endswith("Trigger")]
    return t


def test_intake_is_a_service_bus_trigger_on_the_orders_queue() -> None:
    t = trigger("intake")
    assert t["type"] == "serviceBusTrigger"
    assert t["queueName"] == "%OrdersQueueName%"
    assert t["connection"] == "ServiceBusConnection"


def test_scheduler_and_agents_are_queue_triggers_on_their_queues() -> None:
    expected = {
        "scheduler_commands": "%SchedulerQueueName%",
        "scheduler_replies": "%AgentResponsesQueueName%",
        "inventory_agent": "%InventoryRequestsQueueName%",
        "payment_agent": "%PaymentRequestsQueueName%",
        "shipping_agent": "%ShippingRequestsQueueName%",
    }
    for name, queue in expected.items():
        t = trigger(name)
        assert (t["type"], t["queueName"], t["connection"]) == (
            "queueTrigger", queue, "AzureWebJobsStorage")


def test_supervisor_is_a_timer_on_a_setting() -> None:
    t = trigger("supervisor")
    assert t["type"] == "timerTrigger"
    assert t["schedule"] == "%SupervisorSchedule%"
    assert t["runOnStartup"] is False


def test_the_simulated_services_are_indexed_only_when_they_are_on() -> None:
    """A deployment without SimulatorsEnabled has no fault-injecting route at all."""
    script = ("import function_app; from localrun.host.index import functions_of; "
              "print(sorted(f.name for f in functions_of(function_app.app)))")
    names = {}
    for on in ("true", "false"):
        env = {**os.environ, "SimulatorsEnabled": on,
               "AzureWebJobsStorage": "UseDevelopmentStorage=true",
               "SimulatorBaseUrl": "http://127.0.0.1:7071/api/sim"}  # the services' URLs
        out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        names[on] = set(ast.literal_eval(out.strip().splitlines()[-1]))
    assert names["true"] - names["false"] == {"simulated_service", "simulated_provider"}


def test_every_agent_of_the_workflow_has_a_function() -> None:
    from shared.workflows.orders import ORDER_FULFILMENT

    assert {f"{a}_agent" for a in ORDER_FULFILMENT.agents} <= set(index())


def test_the_function_set_is_exactly_the_documented_one() -> None:
    from shared.domain.workflow import agent_function
    from shared.workflows import REGISTRY

    assert set(index()) == {
        "intake", "scheduler_commands", "scheduler_replies", "supervisor", "simulated_service",
        "simulated_provider",
        "get_order", "list_orders", "resubmit_order", "health", "list_rejected", "overview",
        "console", "openapi", "health_details", "list_alerts", "ack_alert",
        "resubmit_orders", "cancel_order", "cancel_orders", "list_pauses", "pause", "resume",
        "resume_order", "redrive_runner", "start_redrive", "list_redrives", "get_redrive",
        "change_redrive",
        *(agent_function(s) for s in REGISTRY.services),
    }
    assert {"inventory_agent", "payment_agent", "shipping_agent", "email_agent"} <= set(index())


def test_operator_api_routes_and_auth_levels() -> None:
    routes = {name: (trigger(name)["route"], trigger(name)["methods"], trigger(name)["authLevel"])
              for name in ("get_order", "list_orders", "resubmit_order", "health")}
    # Operator routes: the host checks no key, the app checks the operator's identity and app
    # role (tests/unit/test_operator_auth.py); the machine route keeps a function key.
    assert routes == {
        "get_order": ("orders/{order_id}", ["GET"], "ANONYMOUS"),
        "list_orders": ("orders", ["GET"], "ANONYMOUS"),
        "resubmit_order": ("orders/{order_id}/resubmit", ["POST"], "ANONYMOUS"),
        "health": ("health", ["GET"], "FUNCTION"),
    }


def test_the_sdks_log_warnings_only(caplog: Any) -> None:
    import logging

    import function_app  # noqa: F401  (importing the app is what sets the level)

    caplog.set_level(logging.INFO)  # the root at INFO, as the Python worker sets it
    logging.getLogger("azure.core.pipeline.policies.http_logging_policy").info("Request URL: x")
    logging.getLogger("azure.data.tables").warning("a real problem")
    logging.getLogger("httpx").info("HTTP Request: POST http://svc/reserve \"HTTP/1.1 200 OK\"")
    logging.getLogger("shared.handlers.scheduler").info("the app's own record")
    assert [r.getMessage() for r in caplog.records] == ["a real problem", "the app's own record"]
