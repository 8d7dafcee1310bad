"""App settings for running the app locally: the template's, pointed at one Azurite and at the
simulated services of the local host serving HTTP on one port."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def isolated_names(token: str) -> dict[str, str]:
    """Queue and table names no other run uses (tests, bench scenarios)."""
    t = token
    return {
        "OrdersQueueName": f"orders-{t}", "SchedulerQueueName": f"sched-{t}",
        "AgentResponsesQueueName": f"replies-{t}", "InventoryRequestsQueueName": f"inventory-{t}",
        "PaymentRequestsQueueName": f"payment-{t}", "ShippingRequestsQueueName": f"shipping-{t}",
        "StateTableName": f"State{t}", "InFlightTableName": f"InFlight{t}",
        "RejectedOrdersTableName": f"Rejected{t}", "OperatorAlertsTableName": f"Alerts{t}",
        "SimulatorTableName": f"Effects{t}",
    }


def local_app_settings(connection: str, http_port: int, **overrides: str) -> dict[str, str]:
    template = json.loads((ROOT / "local.settings.template.json").read_text())["Values"]
    sim = f"http://127.0.0.1:{http_port}/api/sim"
    return {**template, "AzureWebJobsStorage": connection, "ServiceBusConnection": "local",
            "SimulatorsEnabled": "true", "InventoryServiceUrl": f"{sim}/inventory",
            "PaymentServiceUrl": f"{sim}/payment", "ShippingServiceUrl": f"{sim}/shipping",
            **overrides}
