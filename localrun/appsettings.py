"""App settings for running the app locally: the template's, pointed at one Azurite and at the
simulated services of the local host serving HTTP on one port."""

from __future__ import annotations

import json
from pathlib import Path

from shared.settings import default_queue, service_setting_names
from shared.workflows import REGISTRY

ROOT = Path(__file__).resolve().parent.parent


def isolated_names(token: str) -> dict[str, str]:
    """Queue and table names no other run uses (tests, bench scenarios): every registered
    service's request queue among them."""
    t = token
    return {
        "OrdersQueueName": f"orders-{t}", "SchedulerQueueName": f"sched-{t}",
        "AgentResponsesQueueName": f"replies-{t}",
        **{service_setting_names(s)[1]: f"{s}-{t}" for s in REGISTRY.services},
        "StateTableName": f"State{t}", "InFlightTableName": f"InFlight{t}",
        "RejectedOrdersTableName": f"Rejected{t}", "OperatorAlertsTableName": f"Alerts{t}",
        "SimulatorTableName": f"Effects{t}",
    }


def local_app_settings(connection: str, http_port: int, **overrides: str) -> dict[str, str]:
    template = json.loads((ROOT / "local.settings.template.json").read_text())["Values"]
    # The simulated services follow the port the host serves on.
    # Every registered service's queue, by convention, whether or not the template lists it.
    queues = {service_setting_names(s)[1]: default_queue(s) for s in REGISTRY.services}
    return {**queues, **template, "AzureWebJobsStorage": connection,
            "ServiceBusConnection": "local",
            "SimulatorsEnabled": "true",
            "SimulatorBaseUrl": f"http://127.0.0.1:{http_port}/api/sim",
            **overrides}
