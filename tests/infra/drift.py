"""Holds the Bicep and the code to the same names: queues, tables and app settings.

Reads the Bicep with pycep-parser (there is no Bicep compiler here) and the code through the
function index (the bindings the host reads) and the Settings model (what the code reads).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pycep import BicepParser

import function_app
from localrun.host.index import functions_of
from shared.settings import Settings, service_setting_names
from shared.workflows import REGISTRY

# Read by the code, but never set in Azure, each for a reason.
NOT_IN_AZURE = {
    "AzureWebJobsStorage": "a connection string: local runs only; Azure uses __accountName",
    "AzureWebJobsStorage__tableServiceUri": "an alternative to __accountName",
    "AzureWebJobsStorage__queueServiceUri": "an alternative to __accountName",
    "SchedulerInstanceId": "must differ per instance: taken from WEBSITE_INSTANCE_ID",
    "OperatorDevelopmentRoles": "local runs only: refused at start-up in Azure, where operators "
                                "sign in through App Service Authentication",
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
    """Evaluates the few expression shapes our Bicep uses for names: variables and parameters,
    property and index access, ``loadJsonContent``, ``toObject``, ``map``, ``concat``,
    ``union``, ``join``, lambdas, ``[for x in xs: ...]``, ``??``, ``==`` between strings,
    ``c ? a : b`` once ``c`` is known, and ``${name}`` interpolation. Anything else stays as
    parsed."""

    def __init__(self, bicep: dict[str, Any], base: Path,
                 params: dict[str, Any] | None = None) -> None:
        self._vars = {k: v["value"] for k, v in bicep.get("variables", {}).items()}
        self._params = params or {}
        self._base = base

    def __call__(self, value: Any, scope: dict[str, Any] | None = None) -> Any:
        scope = scope or {}
        if isinstance(value, str):
            if value in scope:
                return scope[value]
            if value in self._params:
                return self._params[value]
            if value in self._vars:
                return self(self._vars[value])
            return re.sub(r"\$\{([A-Za-z_][\w.]*)\}",
                          lambda m: self._path(m.group(1), scope, m.group(0)), value)
        if isinstance(value, list):
            return [self(v, scope) for v in value]
        if not isinstance(value, dict):
            return value
        loop = value.get("loop_type")
        if isinstance(loop, dict) and loop.get("type") == "array":  # [for x in xs: ...]
            detail = loop["detail"]
            return [self(value["config"], {**scope, detail["item_name"]: item})
                    for item in self(detail["array_name"], scope)]
        op, fn = value.get("operator"), value.get("function")
        if isinstance(op, dict) and op.get("type") in ("property_accessor", "index_accessor"):
            target = self(op["operands"]["operand_1"], scope)
            key = op["operands"]["operand_2"]  # a property's name is not an expression
            if op["type"] == "index_accessor":
                key = self(key, scope)
            return target.get(key) if isinstance(target, dict) else value
        if isinstance(op, dict) and op.get("type") == "equals":
            # Only with a parameter the caller gave: an unknown name reads as a string too.
            sides = [op["operands"][k] for k in ("operand_1", "operand_2")]
            if not any(isinstance(x, str) and (x in self._params or x in scope) for x in sides):
                return value
            left, right = (self(x, scope) for x in sides)
            return left == right if isinstance(left, str) and isinstance(right, str) else value
        if isinstance(op, dict) and op.get("type") == "conditional":
            parts = op["operands"]
            condition = self(parts["condition"], scope)
            if not isinstance(condition, bool):
                return value
            return self(parts["true_value" if condition else "false_value"], scope)
        if isinstance(op, dict) and op.get("type") == "coalesce":
            first = self(op["operands"]["operand_1"], scope)
            return first if first is not None else self(op["operands"]["operand_2"], scope)
        if isinstance(fn, dict):
            return self._call(fn["type"], list(fn["parameters"].values()), scope, value)
        return {k: self(v, scope) for k, v in value.items()}

    def _path(self, dotted: str, scope: dict[str, Any], text: str) -> str:
        head, *rest = dotted.split(".")
        target = self(head, scope)
        for part in rest:
            if not isinstance(target, dict):
                return text
            target = target.get(part)
        return target if isinstance(target, str) else text

    def _apply(self, lam: dict[str, Any], arg: Any, scope: dict[str, Any]) -> Any:
        detail = lam["detail"]
        return self(detail["expression"], {**scope, detail["var_1"]: arg})

    def _call(self, name: str, args: list[Any], scope: dict[str, Any], raw: Any) -> Any:
        if name == "load_json_content":
            return json.loads((self._base / args[0]).read_text())
        if name == "toObject":
            items = self(args[0], scope)
            return {self._apply(args[1], i, scope): self._apply(args[2], i, scope)
                    for i in items}
        if name == "map":
            return [self._apply(args[1], i, scope) for i in self(args[0], scope)]
        if name == "join":
            items = self(args[0], scope)
            if isinstance(items, list) and all(isinstance(i, str) for i in items):
                return str(self(args[1], scope)).join(items)
            return raw
        if name == "concat":
            return [x for a in args for x in self(a, scope)]
        if name == "union":
            merged: dict[str, Any] = {}
            for a in args:
                merged.update(self(a, scope))
            return merged
        return raw


def bicep_names(infra: Path) -> BicepNames:
    main = parse(infra / "main.bicep")
    resolve = _Resolver(main, infra)
    modules = main["modules"]
    settings = dict(resolve("appSettings"))
    function = parse(infra / "app" / "function.bicep")
    fresolve = _Resolver(function, infra / "app")
    union = function["resources"]["settings"]["config"]["properties"]["function"]["parameters"]
    for arg in union.values():
        if isinstance(arg, dict):
            settings.update(arg)
        elif arg in function.get("variables", {}):
            value = function["variables"][arg]["value"]
            op = value.get("operator", {}) if isinstance(value, dict) else {}
            settings.update(fresolve(op.get("operands", {}).get("true_value", value)))
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
    queue_names = {service_setting_names(svc)[1] for svc in REGISTRY.services}
    code |= queue_names
    # A service's URL: SimulatorBaseUrl/<service> in a demo deployment, else the deployer's
    # (the serviceUrls parameter); the app refuses to start without one (shared/settings.py).
    if "SimulatorBaseUrl" not in b.app_settings:
        problems.append("a demo deployment sets no SimulatorBaseUrl: the services have no URL")

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
