"""Issue 32: public network access to storage and Service Bus is a parameter, on for the
quickstart, off for a deployment that reaches them through private endpoints."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.infra.drift import _Resolver, parse

INFRA = ROOT / "infra"


def _resolved(path: str, resource: str, **params: str) -> dict[str, Any]:
    """A resource's body in one module with its parameters given."""
    bicep = parse(INFRA / path)
    body = bicep["resources"][resource]["config"]
    return dict(_Resolver(bicep, (INFRA / path).parent, params)(body))


def test_main_takes_the_parameter_on_by_default_and_hands_it_to_storage_and_service_bus() -> None:
    main = parse(INFRA / "main.bicep")
    param = main["parameters"]["publicNetworkAccess"]
    assert param["default"] == "Enabled"  # the quickstart: azd up works from a laptop
    allowed = next(d["argument"] for d in param["decorators"] if d["type"] == "allowed")
    assert sorted(allowed) == ["Disabled", "Enabled"]
    for module in ("storage", "serviceBus"):
        given = main["modules"][module]["config"]["params"]
        assert given["publicNetworkAccess"] == "publicNetworkAccess", module
    function = main["modules"]["function"]["config"]["params"]
    assert function["appSubnetId"] == "appSubnetId"
    # azd: PUBLIC_NETWORK_ACCESS=Disabled and APP_SUBNET_ID turn it off
    given = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert given["publicNetworkAccess"]["value"] == "${PUBLIC_NETWORK_ACCESS=Enabled}"
    assert given["appSubnetId"]["value"] == "${APP_SUBNET_ID=}"


@pytest.mark.parametrize(("access", "default_action"), [("Enabled", "Allow"),
                                                        ("Disabled", "Deny")])
def test_storage_follows_the_parameter(access: str, default_action: str) -> None:
    props = _resolved("app/storage.bicep", "storage", publicNetworkAccess=access)["properties"]
    assert props["publicNetworkAccess"] == access
    assert props["networkAcls"] == {"defaultAction": default_action, "bypass": "AzureServices"}
    # whichever way, no request without Entra ID
    assert props["allowSharedKeyAccess"] is False and props["allowBlobPublicAccess"] is False


@pytest.mark.parametrize(("access", "sku"), [
    ("Enabled", {"name": "Standard", "tier": "Standard", "capacity": None}),
    # private endpoints exist on Premium alone: off without them, nothing could reach it
    ("Disabled", {"name": "Premium", "tier": "Premium", "capacity": 1})])
def test_service_bus_follows_the_parameter(access: str, sku: dict[str, Any]) -> None:
    body = _resolved("app/servicebus.bicep", "namespace", publicNetworkAccess=access)
    assert body["properties"]["publicNetworkAccess"] == access
    assert body["sku"] == sku
    assert body["properties"]["disableLocalAuth"] is True


def test_the_app_joins_the_subnet_it_is_given() -> None:
    """Its outbound traffic then goes through the virtual network that holds the private
    endpoints; without one (the default) the property is left out."""
    site = parse(INFRA / "app" / "function.bicep")["resources"]["app"]["config"]
    assert site["properties"]["virtualNetworkSubnetId"] == {"operator": {
        "type": "conditional", "operands": {
            "condition": {"function": {"type": "empty",
                                       "parameters": {"item_to_test": "appSubnetId"}}},
            "true_value": None, "false_value": "appSubnetId"}}}


@pytest.mark.parametrize(("env", "refused"), [
    ({}, False),  # the quickstart
    ({"PUBLIC_NETWORK_ACCESS": "Enabled"}, False),
    ({"PUBLIC_NETWORK_ACCESS": "Disabled", "APP_SUBNET_ID": "/subscriptions/x/subnets/app"}, False),
    ({"PUBLIC_NETWORK_ACCESS": "Disabled"}, True),
    ({"PUBLIC_NETWORK_ACCESS": "Disabled", "APP_SUBNET_ID": ""}, True)])
def test_azd_refuses_closed_networks_without_a_subnet_before_provisioning(
        env: dict[str, str], refused: bool) -> None:
    """Closed to the internet with no subnet to reach the private endpoints, the app would deploy
    and fail at its first request: azd's preprovision hook stops it first, saying what to set."""
    hook = yaml.safe_load((ROOT / "azure.yaml").read_text())["hooks"]["preprovision"]
    assert hook["posix"]["shell"] == "sh"
    ran = subprocess.run(["sh", "-c", hook["posix"]["run"]], env={"PATH": "/usr/bin:/bin", **env},
                         capture_output=True, text=True, timeout=30)
    assert (ran.returncode != 0) is refused, ran.stderr
    if refused:
        assert "PUBLIC_NETWORK_ACCESS=Disabled needs APP_SUBNET_ID" in ran.stderr
    # the Windows hook says the same
    assert "needs APP_SUBNET_ID" in hook["windows"]["run"]
