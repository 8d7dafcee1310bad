"""The declared senders in the Bicep: the queues it makes are the ones the app reads and writes
for each (shared/domain/senders.py), and each sender's roles reach its own queues only: it may
send on its orders queue and read its status queue, never put a message there."""

from __future__ import annotations

from typing import Any

from shared.domain.senders import Sender
from tests.conftest import ROOT
from tests.infra.drift import parse

INFRA = ROOT / "infra"
SENDERS = parse(INFRA / "app" / "senders.bicep")
MAIN = parse(INFRA / "main.bicep")


def _accessor(node: Any) -> tuple[str, str]:
    operands = node["operator"]["operands"]
    return operands["operand_1"], operands["operand_2"]


def _name_of(value: str, sender: str) -> str:
    return value.replace("${s.name}", sender).replace("${s}", sender)


def test_the_bicep_names_each_senders_queues_as_the_app_does() -> None:
    sender = Sender("shopa")
    resources = SENDERS["resources"]
    assert _name_of(resources["ordersQueues"]["config"]["config"]["name"], "shopa") == (
        sender.orders_queue)
    assert _name_of(resources["statusQueues"]["config"]["config"]["name"], "shopa") == (
        sender.status_queue)
    made = parse(INFRA / "app" / "servicebus.bicep")["resources"]["senderQueues"]
    assert _name_of(made["config"]["config"]["name"], "shopa") == sender.orders_queue
    status = MAIN["variables"]["statusQueueNames"]["value"]["config"]
    assert _name_of(status, "shopa") == sender.status_queue


def test_each_sender_reaches_its_own_queues_only_and_cannot_write_its_status() -> None:
    found = set()
    for name, resource in SENDERS["resources"].items():
        if resource["type"] != "Microsoft.Authorization/roleAssignments":
            continue
        body = resource["config"]["config"]
        assert resource["config"]["loop_type"]["detail"]["array_name"] == "senders", name
        principal = body["properties"]["principalId"]
        who = "app" if principal == "appPrincipalId" else _accessor(principal)[0]
        role = _accessor(body["properties"]["roleDefinitionId"]["function"]["parameters"][
            "resource_name_1"])[1]
        scope = body["scope"]["operator"]["operands"]["operand_1"]
        found.add((who, role, scope))
    assert found == {
        ("app", "serviceBusDataOwner", "ordersQueues"),
        ("app", "storageQueueDataMessageSender", "statusQueues"),
        ("s", "serviceBusDataSender", "ordersQueues"),
        # Peek, receive and delete: no add, so what is on it came from the app.
        ("s", "storageQueueDataMessageProcessor", "statusQueues"),
    }


def _find(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        if key in node:
            return node[key]
        for v in node.values():
            if (found := _find(v, key)) is not None:
                return found
    return None


def test_the_app_is_told_the_senders_the_bicep_made() -> None:
    """The Senders setting is the names of the senders whose queues and roles the Bicep made,
    one list for both."""
    setting = _find(MAIN["variables"]["appSettings"], "Senders")
    assert setting == {"function": {"type": "join", "parameters": {
        "input_array": "senderNames", "delimiter": ","}}}
    names = MAIN["variables"]["senderNames"]["value"]
    assert names["loop_type"]["detail"]["array_name"] == "senders"
    assert _accessor(names["config"]) == ("s", "name")


def test_a_senders_dead_lettered_orders_raise_the_alert_the_default_ones_do() -> None:
    alerts = parse(INFRA / "app" / "alerts.bicep")
    assert _name_of(alerts["variables"]["senderQueues"]["value"]["config"], "shopa") == (
        Sender("shopa").orders_queue)
    assert "senderQueues" in str(alerts["resources"])
    assert _find(MAIN["modules"]["alerts"]["config"]["params"], "senderNames") == "senderNames"
