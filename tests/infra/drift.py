"""Holds the Bicep and the code to the same names: queues, tables and app settings.

Reads the Bicep with pycep-parser (there is no Bicep compiler here) and the code through the
function index (the bindings the host reads) and the Settings model (what the code reads).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pycep import BicepParser

import function_app
from localrun.index import functions_of
from shared.settings import Settings, service_setting_names
from shared.workflows import REGISTRY

# Read by the code, but never set in Azure, each for a reason.
NOT_IN_AZURE = {
    "AzureWebJobsStorage": "a connection string: local runs only; Azure uses __accountName",
    "AzureWebJobsStorage__tableServiceUri": "an alternative to __accountName",
    "AzureWebJobsStorage__queueServiceUri": "an alternative to __accountName",
    "SchedulerInstanceId": "must differ per instance: taken from WEBSITE_INSTANCE_ID",
}
# Set in Azure for the Functions host or its extensions, not read by our code.
HOST_SETTINGS = {
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
    "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
    "PYTHON_THREADPOOL_THREAD_COUNT",  # read by the Python worker
    "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY",  # the worker sets up the Azure Monitor distro
    "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS",  # read by the distro
    "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",  # read by the distro
}

_parser = BicepParser()


def parse(path: Path) -> dict[str, Any]:
    return _parser.parse(file_path=path)


@dataclass(frozen=True)
class BicepNames:
    app_settings: dict[str, Any]
    queues: set[str]
    poison_queues: bool
    tables: set[str]
    service_bus_queue: str


class _Resolver:
    """Evaluates the few expression shapes our main.bicep uses for names."""

    def __init__(self, variables: dict[str, Any]) -> None:
        self._vars = {k: v["value"] for k, v in variables.items()}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self(self._vars[value]) if value in self._vars else value
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            op = value.get("operator")
            if isinstance(op, dict) and op.get("type") == "property_accessor":
                return self(op["operands"]["operand_1"])[op["operands"]["operand_2"]]
            return {k: self(v) for k, v in value.items()}
        return value


def bicep_names(infra: Path) -> BicepNames:
    main = parse(infra / "main.bicep")
    resolve = _Resolver(main.get("variables", {}))
    modules = main["modules"]
    settings = dict(resolve("appSettings"))
    function = parse(infra / "app" / "function.bicep")
    union = function["resources"]["settings"]["config"]["properties"]["function"]["parameters"]
    for arg in union.values():
        if isinstance(arg, dict):
            settings.update(arg)
        elif arg in function.get("variables", {}):
            value = function["variables"][arg]["value"]
            op = value.get("operator", {}) if isinstance(value, dict) else {}
            settings.update(op.get("operands", {}).get("true_value", value))
    storage = parse(infra / "app" / "storage.bicep")
    poison = storage["resources"].get("poisonQueues", {})
    return BicepNames(
        app_settings=settings,
        queues=set(resolve(modules["storage"]["config"]["params"]["queueNames"])),
        poison_queues="'${q}-poison'" in str(poison) or "${q}-poison" in str(poison),
        tables=set(resolve(modules["storage"]["config"]["params"]["tableNames"])),
        service_bus_queue=resolve(modules["serviceBus"]["config"]["params"]["ordersQueueName"]),
    )


def drift(infra: Path) -> list[str]:
    """Every disagreement between the Bicep in ``infra`` and the code, as a sentence."""
    b = bicep_names(infra)
    problems: list[str] = []
    bound: dict[str, str] = {}  # setting -> binding type (a queue trigger's or output's)
    connections: set[str] = set()
    for f in functions_of(function_app.app):
        for binding in f.bindings:
            for key, value in binding.items():
                if isinstance(value, str):
                    for name in re.findall(r"%([^%]+)%", value):
                        bound[name] = binding["type"] if key == "queueName" else "setting"
            if binding.get("connection"):
                connections.add(binding["connection"])
    code = {f.alias for f in Settings.model_fields.values() if f.alias}
    code |= {name for svc in REGISTRY.services for name in service_setting_names(svc)}

    for name, kind in sorted(bound.items()):
        if name not in b.app_settings:
            problems.append(f"{name} is bound in function_app.py but not set in the Bicep")
        elif kind in ("queueTrigger", "queue") and b.app_settings[name] not in b.queues:
            problems.append(f"{name}={b.app_settings[name]!r} is not a queue the Bicep creates")
        elif kind == "serviceBusTrigger" and b.app_settings[name] != b.service_bus_queue:
            problems.append(f"{name}={b.app_settings[name]!r} is not the Service Bus queue "
                            f"{b.service_bus_queue!r}")
    for conn in sorted(connections):
        if not any(k.startswith(f"{conn}__") for k in b.app_settings):
            problems.append(f"connection {conn} has no identity-based settings in the Bicep")
    for name in sorted(code - set(NOT_IN_AZURE)):
        if name not in b.app_settings:
            problems.append(f"{name} is read by the code but not set in the Bicep")
    for name in sorted(b.app_settings):
        used = (name in code or name in bound or name in HOST_SETTINGS
                or any(name.startswith(f"{c}__") for c in connections))
        if not used:
            problems.append(f"{name} is set in the Bicep but nothing reads it")
    queue_settings = {v for k, v in b.app_settings.items() if k.endswith("QueueName")}
    for q in sorted(b.queues - queue_settings):
        problems.append(f"queue {q!r} is created by the Bicep but no setting names it")
    for name in sorted(k for k in code if k.endswith("QueueName") and k in b.app_settings):
        if name not in bound and b.app_settings[name] not in b.queues | {b.service_bus_queue}:
            problems.append(f"{name}={b.app_settings[name]!r} is not a queue the Bicep creates")
    table_settings = {k: v for k, v in b.app_settings.items() if k.endswith("TableName")}
    for k, v in sorted(table_settings.items()):
        if v not in b.tables:
            problems.append(f"{k}={v!r} is not a table the Bicep creates")
    for t in sorted(b.tables - set(table_settings.values())):
        problems.append(f"table {t!r} is created by the Bicep but no setting names it")
    if not b.poison_queues:
        problems.append("the Bicep creates no <queue>-poison queues")
    return problems
