"""Every Bicep resource body checked against the ARM model of its type and API version.

There is no Bicep compiler here, so the Bicep is read with pycep-parser and each resource's body
is walked beside the REST shape of its type, taken from the azure-mgmt package release that ships
that API version (tests/infra/arm_models.py, requirements-armschemas.txt). Checked: property
names, literal value types, enum values (case-insensitive, as ARM compares them), parameter types
where a parameter is used, read-only properties set, required properties missing; and for
modules, that every parameter passed is declared, every parameter without a default is passed,
and every output read is declared. Expressions (function calls, property access, conditions) have
no type here and are not checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pycep import BicepParser

ROOT = Path(__file__).resolve().parents[2]
ARMSCHEMAS = ROOT / ".venv" / "armschemas"
COMMON = ("azure-mgmt-core-1.6.0", "azure-common-1.1.28")

# type@apiVersion -> (package folder under .venv/armschemas, models module, model class)
MODELS: dict[str, tuple[str, str, str]] = {
    "Microsoft.Web/sites@2024-04-01":
        ("azure-mgmt-web-8.0.0", "azure.mgmt.web.v2024_04_01.models", "Site"),
    "Microsoft.Web/serverfarms@2024-04-01":
        ("azure-mgmt-web-8.0.0", "azure.mgmt.web.v2024_04_01.models", "AppServicePlan"),
    "Microsoft.Web/sites/config@2024-04-01":
        ("azure-mgmt-web-8.0.0", "azure.mgmt.web.v2024_04_01.models", "StringDictionary"),
    "Microsoft.Web/sites/config@2024-04-01/authsettingsV2":
        ("azure-mgmt-web-8.0.0", "azure.mgmt.web.v2024_04_01.models", "SiteAuthSettingsV2"),
    "Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01":
        ("azure-mgmt-web-8.0.0", "azure.mgmt.web.v2024_04_01.models",
         "CsmPublishingCredentialsPoliciesEntity"),
    "Microsoft.Web/sites/host/functionKeys@2024-04-01":
        ("azure-mgmt-web-8.0.0", "azure.mgmt.web.v2024_04_01.models", "KeyInfo"),
    "Microsoft.Storage/storageAccounts@2023-05-01":
        ("azure-mgmt-storage-21.2.1", "azure.mgmt.storage.v2023_05_01.models",
         "StorageAccountCreateParameters"),
    "Microsoft.Storage/storageAccounts/blobServices@2023-05-01":
        ("azure-mgmt-storage-21.2.1", "azure.mgmt.storage.v2023_05_01.models",
         "BlobServiceProperties"),
    "Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01":
        ("azure-mgmt-storage-21.2.1", "azure.mgmt.storage.v2023_05_01.models", "BlobContainer"),
    "Microsoft.Storage/storageAccounts/queueServices@2023-05-01":
        ("azure-mgmt-storage-21.2.1", "azure.mgmt.storage.v2023_05_01.models",
         "QueueServiceProperties"),
    "Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01":
        ("azure-mgmt-storage-21.2.1", "azure.mgmt.storage.v2023_05_01.models", "StorageQueue"),
    "Microsoft.Storage/storageAccounts/tableServices@2023-05-01":
        ("azure-mgmt-storage-21.2.1", "azure.mgmt.storage.v2023_05_01.models",
         "TableServiceProperties"),
    "Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01":
        ("azure-mgmt-storage-21.2.1", "azure.mgmt.storage.v2023_05_01.models", "Table"),
    # 10.0.0 ships 2026-01-01 only (models generated from TypeSpec).
    "Microsoft.ServiceBus/namespaces@2026-01-01":
        ("azure-mgmt-servicebus-10.0.0", "azure.mgmt.servicebus.models", "SBNamespace"),
    "Microsoft.ServiceBus/namespaces/queues@2026-01-01":
        ("azure-mgmt-servicebus-10.0.0", "azure.mgmt.servicebus.models", "SBQueue"),
    "Microsoft.Insights/diagnosticSettings@2021-05-01-preview":
        ("azure-mgmt-monitor-6.0.2", "azure.mgmt.monitor.v2021_05_01_preview.models",
         "DiagnosticSettingsResource"),
    "Microsoft.Insights/actionGroups@2023-01-01":
        ("azure-mgmt-monitor-6.0.2", "azure.mgmt.monitor.v2023_01_01.models",
         "ActionGroupResource"),
    "Microsoft.Insights/metricAlerts@2018-03-01":
        ("azure-mgmt-monitor-6.0.2", "azure.mgmt.monitor.v2018_03_01.models",
         "MetricAlertResource"),
    # 7.0.0 ships one API version per operation group: scheduled query rules at 2023-12-01.
    "Microsoft.Insights/scheduledQueryRules@2023-12-01":
        ("azure-mgmt-monitor-7.0.0", "azure.mgmt.monitor.models", "ScheduledQueryRuleResource"),
    "Microsoft.Insights/workbooks@2023-06-01":
        ("azure-mgmt-applicationinsights-4.1.0",
         "azure.mgmt.applicationinsights.v2023_06_01.models", "Workbook"),
    "Microsoft.Insights/components@2020-02-02":
        ("azure-mgmt-applicationinsights-4.1.0",
         "azure.mgmt.applicationinsights.v2020_02_02.models", "ApplicationInsightsComponent"),
    "Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31":
        ("azure-mgmt-msi-7.0.0", "azure.mgmt.msi.v2023_01_31.models", "Identity"),
    # 13.1.1 ships workspaces at 2025-07-01 only.
    "Microsoft.OperationalInsights/workspaces@2025-07-01":
        ("azure-mgmt-loganalytics-13.1.1", "azure.mgmt.loganalytics.models", "Workspace"),
    "Microsoft.Authorization/roleAssignments@2022-04-01":
        ("azure-mgmt-authorization-4.0.0", "azure.mgmt.authorization.v2022_04_01.models",
         "RoleAssignmentCreateParameters"),
    "Microsoft.Resources/resourceGroups@2024-11-01":
        ("azure-mgmt-resource-23.3.0", "azure.mgmt.resource.resources.v2024_11_01.models",
         "ResourceGroup"),
}

# Keys of a resource declaration that are Bicep's, not the resource body's.
DEPLOYMENT_KEYS = {"parent", "scope", "dependsOn", "name"}
_EXPRESSION_KEYS = {"function", "operator"}

_parser = BicepParser()


@cache
def model(type_and_version: str) -> dict[str, Any]:
    folder, module, cls = MODELS[type_and_version]
    path = os.pathsep.join(str(ARMSCHEMAS / f) for f in (folder, *COMMON))
    out = subprocess.run([sys.executable, "-m", "tests.infra.arm_models", module, cls],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": path})
    if out.returncode:
        raise RuntimeError(f"cannot read the model of {type_and_version}: {out.stderr[-2000:]}")
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def parse(path: Path) -> dict[str, Any]:
    return _parser.parse(file_path=path)  # type: ignore[no-any-return]


@dataclass
class Symbols:
    params: dict[str, dict[str, Any]]
    variables: dict[str, Any]
    others: set[str] = field(default_factory=set)  # resources, modules, loop items

    @classmethod
    def of(cls, bicep: dict[str, Any]) -> Symbols:
        return cls(bicep.get("parameters", {}),
                   {k: v["value"] for k, v in bicep.get("variables", {}).items()},
                   set(bicep.get("resources", {})) | set(bicep.get("modules", {})))


def _allowed(param: dict[str, Any]) -> list[Any] | None:
    for d in param.get("decorators", []):
        if d.get("type") == "allowed":
            return list(d["argument"])
    return None


_PARAM_TYPES = {"string": {"string"}, "int": {"integer", "number"}, "bool": {"boolean"},
                "object": {"object", "map"}, "array": {"array"}}


def _is_expression(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _EXPRESSION_KEYS


def check_value(value: Any, node: dict[str, Any], where: str, sym: Symbols,
                seen: frozenset[str] = frozenset()) -> list[str]:
    t = node["t"]
    if t == "any" or value is None or _is_expression(value):
        return []
    if isinstance(value, bool):
        return [] if t == "boolean" else [f"{where}: true/false where the schema has {t}"]
    if isinstance(value, int | float):
        return [] if t in ("integer", "number") else [f"{where}: a number where the schema has {t}"]
    if isinstance(value, str):
        if value in sym.params:
            p = sym.params[value]
            if t not in _PARAM_TYPES.get(p["type"], {t}):
                return [f"{where}: parameter {value} is {p['type']} where the schema has {t}"]
            allowed, enum = _allowed(p), node.get("enum")
            if allowed and enum:
                bad = [a for a in allowed if str(a).lower() not in {e.lower() for e in enum}]
                if bad:
                    return [f"{where}: parameter {value} allows {bad}, not in {enum}"]
            return []
        if value in sym.variables and value not in seen:
            return check_value(sym.variables[value], node, where, sym, seen | {value})
        if value in sym.others or "${" in value:
            return [] if t == "string" or value in sym.others else [
                f"{where}: a string where the schema has {t}"]
        if t != "string":
            return [f"{where}: the string {value!r} where the schema has {t}"]
        enum = node.get("enum")
        if enum and value.lower() not in {e.lower() for e in enum}:
            return [f"{where}: {value!r} is not one of {enum}"]
        return []
    if isinstance(value, list):
        if t != "array":
            return [f"{where}: a list where the schema has {t}"]
        return [p for i, v in enumerate(value)
                for p in check_value(v, node["items"], f"{where}[{i}]", sym, seen)]
    if isinstance(value, dict):
        return check_object(value, node, where, sym, seen)
    return []


def check_object(value: dict[str, Any], node: dict[str, Any], where: str, sym: Symbols,
                 seen: frozenset[str] = frozenset(), top: bool = False) -> list[str]:
    t = node["t"]
    items = {k.strip("'"): v for k, v in value.items()}
    if t == "map":
        return [p for k, v in items.items()
                for p in check_value(v, node["values"], f"{where}.{k}", sym, seen)]
    if t != "object":
        return [f"{where}: an object where the schema has {t}"]
    problems = []
    for k, v in items.items():
        if top and k in DEPLOYMENT_KEYS:
            continue
        if k not in node["props"]:
            problems.append(f"{where}: {k} is not a property here "
                            f"(known: {', '.join(sorted(node['props']))})")
            continue
        if k in node["readonly"]:
            problems.append(f"{where}: {k} is read-only")
            continue
        problems += check_value(v, node["props"][k], f"{where}.{k}", sym, seen)
    for r in node["required"]:
        if r not in items and not (top and r in DEPLOYMENT_KEYS):
            problems.append(f"{where}: the required property {r} is missing")
    return problems


def _body(config: dict[str, Any]) -> dict[str, Any]:
    # for-loops and conditions wrap the body.
    while isinstance(config, dict) and "config" in config and (
            "loop_type" in config or "condition" in config):
        config = config["config"]
    return config


def check_file(path: Path) -> list[str]:
    bicep = parse(path)
    sym = Symbols.of(bicep)
    problems = []
    for name, r in bicep.get("resources", {}).items():
        key = f"{r['type']}@{r['api_version']}"
        where = f"{path.name}:{name} ({key})"
        # sites/config takes a different body by its name: appsettings is a StringDictionary,
        # authsettingsV2 a SiteAuthSettingsV2.
        named = f"{key}/{_body(r['config']).get('name')}"
        key = named if named in MODELS else key
        if key not in MODELS:
            problems.append(f"{where}: no ARM model to check it against (add it to MODELS)")
            continue
        body = _body(r["config"])
        if r.get("existing"):
            continue  # a reference to a resource deployed elsewhere: only its name
        loop = r["config"].get("loop_type", {}) if isinstance(r["config"], dict) else {}
        item = (loop.get("detail") or {}).get("item_name")
        local = Symbols(sym.params, sym.variables, sym.others | ({item} if item else set()))
        problems += check_object(body, model(key), where, local, top=True)
    return problems


def _output_reads(value: Any, modules: set[str]) -> set[tuple[str, str]]:
    """(module, output) for every ``module.outputs.name`` (pycep nests it to the right)."""
    found: set[tuple[str, str]] = set()
    if isinstance(value, dict):
        op = value.get("operator")
        if isinstance(op, dict) and op.get("type") == "property_accessor":
            first, rest = op["operands"]["operand_1"], op["operands"]["operand_2"]
            inner = rest.get("operator") if isinstance(rest, dict) else None
            if (isinstance(first, str) and first in modules and isinstance(inner, dict)
                    and inner.get("type") == "property_accessor"
                    and inner["operands"]["operand_1"] == "outputs"):
                name = inner["operands"]["operand_2"]
                if isinstance(name, dict):  # module.outputs.a.b: the output is a
                    name = name["operator"]["operands"]["operand_1"]
                found.add((first, name))
        for v in value.values():
            found |= _output_reads(v, modules)
    elif isinstance(value, list):
        for v in value:
            found |= _output_reads(v, modules)
    return found


def check_modules(path: Path) -> list[str]:
    bicep = parse(path)
    modules = bicep.get("modules", {})
    problems = []
    outputs: dict[str, set[str]] = {}
    for name, m in modules.items():
        where = m["detail"]["path"]
        target = parse(path.parent / where)
        declared = target.get("parameters", {})
        outputs[name] = set(target.get("outputs", {}))
        passed = set(_body(m["config"]).get("params", {}))
        for p in sorted(passed - set(declared)):
            problems.append(f"{path.name}: module {name} passes {p}, which {where} does "
                            "not declare")
        for p, spec in declared.items():
            if spec.get("default") is None and p not in passed:
                problems.append(f"{path.name}: module {name} does not pass {p}, which "
                                f"{where} needs (no default)")
    for module, out in sorted(_output_reads(bicep, set(modules))):
        if out not in outputs[module]:
            problems.append(f"{path.name}: {module}.outputs.{out} is not an output of "
                            f"{modules[module]['detail']['path']}")
    return problems


def check(infra: Path) -> list[str]:
    problems = []
    for path in sorted(infra.rglob("*.bicep")):
        problems += check_file(path)
        problems += check_modules(path)
    return problems
