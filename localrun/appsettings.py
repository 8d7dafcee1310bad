"""App settings for running the app locally: the template's, pointed at one Azurite and at the
simulated services of the local host serving HTTP on one port."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

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


# The names this machine's own address goes by.
LOOPBACK = {"localhost", "127.0.0.1", "::1"}
SIM_PATH = "/api/sim"
# What pydantic (shared/settings.py) reads as true.
_TRUE = {"1", "on", "t", "true", "y", "yes"}


def follow_port(env: MutableMapping[str, str], http_port: int) -> dict[str, tuple[str, str]]:
    """Point the Agents at the simulated services this local host serves, on its own port.

    With SimulatorsEnabled the app serves them itself, under /api/sim. A URL for them on this
    machine but another port (local.settings.json's is 7071's, as is the app's default when no
    SimulatorBaseUrl is set) would send every Agent's call to some other process, or to none,
    and every order would fail while the host looked healthy. So SimulatorBaseUrl, and any
    <Service>ServiceUrl under /api/sim on this machine, follow ``http_port``; a URL elsewhere
    is left as it is. Changes ``env``; returns each setting it changed: (was, now)."""
    if env.get("SimulatorsEnabled", "").strip().lower() not in _TRUE:
        return {}
    changed: dict[str, tuple[str, str]] = {}
    base = env.get("SimulatorBaseUrl", "")
    if not base:
        env["SimulatorBaseUrl"] = f"http://127.0.0.1:{http_port}{SIM_PATH}"
    keys = ["SimulatorBaseUrl", *(service_setting_names(s)[0] for s in REGISTRY.services)]
    for key in keys:
        url = env.get(key, "")
        moved = _on_port(url, http_port)
        if moved != url:
            env[key] = moved
            changed[key] = (url, moved)
    return changed


def _on_port(url: str, port: int) -> str:
    try:
        parts = urlsplit(url)
        given = parts.port
    except ValueError:  # not a URL: load_settings names the setting
        return url
    if (parts.hostname not in LOOPBACK or not parts.path.startswith(SIM_PATH)
            or given == port):
        return url
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return urlunsplit(parts._replace(netloc=f"{host}:{port}"))
