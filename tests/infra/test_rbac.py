"""Issue 32: the app's identity reaches the queues and tables it uses, one by one, where Azure
allows it; what stays account-wide is the Functions host's blob storage and, narrowed by a
condition on the queue's name, the sending of status updates to reply_to queues."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from shared.settings import reply_prefixes
from tests.conftest import ROOT
from tests.infra.drift import _Resolver, parse

INFRA = ROOT / "infra"
RBAC = parse(INFRA / "app" / "rbac.bicep")
MAIN = parse(INFRA / "main.bicep")
MAIN_RESOLVE = _Resolver(MAIN, INFRA)
RBAC_PARAMS = MAIN["modules"]["rbac"]["config"]["params"]
STORAGE_PARAMS = MAIN["modules"]["storage"]["config"]["params"]
STORAGE_ROLES = {"storageBlobDataOwner", "storageQueueDataContributor",
                 "storageTableDataContributor", "storageQueueDataReader",
                 "storageTableDataReader", "storageQueueDataMessageSender"}


@dataclass(frozen=True)
class Assignment:
    name: str
    principal: str  # appPrincipalId or userPrincipalId
    role: str  # the key in rbac.bicep's roles
    scope: str  # a resource's symbolic name in rbac.bicep ("queues" for queues[i])
    loop_over: str | None  # the parameter a loop goes through
    body: dict[str, Any]


def _assignments() -> list[Assignment]:
    out = []
    for name, resource in RBAC["resources"].items():
        if resource["type"] != "Microsoft.Authorization/roleAssignments":
            continue
        config = resource["config"]
        body = config.get("config", config)
        loop = config.get("loop_type")
        over = loop["detail"]["array_name"] if loop else None
        if isinstance(over, dict):  # (empty(userPrincipalId) ? [] : queueNames)
            over = over["operator"]["operands"]["false_value"]
        scope = body["scope"]
        if isinstance(scope, dict):  # queues[i]
            operands = scope["operator"]["operands"]
            assert operands["operand_2"] == loop["detail"]["index_name"], name
            scope = operands["operand_1"]
        role = body["properties"]["roleDefinitionId"]["function"]["parameters"][
            "resource_name_1"]["operator"]["operands"]["operand_2"]
        out.append(Assignment(name, body["properties"]["principalId"], role, scope, over, body))
    return out


ASSIGNMENTS = _assignments()


def _existing(symbol: str) -> tuple[str, str]:
    """What an existing queue or table collection in rbac.bicep loops over, and its name."""
    config = RBAC["resources"][symbol]["config"]
    assert RBAC["resources"][symbol]["existing"] is True
    return config["loop_type"]["detail"]["array_name"], config["config"]["name"]


def test_the_storage_module_and_the_roles_are_given_the_same_queues_and_tables() -> None:
    """So a queue or table added to the app (a new service's request queue from
    infra/services.json) gets its role assignment with it."""
    assert RBAC_PARAMS["queueNames"] == STORAGE_PARAMS["queueNames"] == "appQueueNames"
    assert RBAC_PARAMS["tableNames"] == STORAGE_PARAMS["tableNames"] == "tableNames"
    queues = MAIN_RESOLVE("appQueueNames")
    services = MAIN_RESOLVE(MAIN["variables"]["services"]["value"])
    assert set(services["queues"]) <= set(queues)  # every Agent's request queue
    assert {"scheduler-commands", "agent-responses"} <= set(queues)
    assert len(MAIN_RESOLVE("tableNames")) == 5
    assert _existing("queues") == ("queueNames", "q")
    assert _existing("poisonQueues") == ("queueNames", "${q}-poison")
    assert _existing("tables") == ("tableNames", "t")


@pytest.mark.parametrize("principal", ["appPrincipalId", "userPrincipalId"])
def test_queue_and_table_roles_are_on_each_queue_and_table_never_the_account(
        principal: str) -> None:
    storage = [a for a in ASSIGNMENTS if a.principal == principal and a.role in STORAGE_ROLES]
    scoped = {(a.scope, a.loop_over, a.role) for a in storage if a.scope != "storage"}
    verb = "Contributor" if principal == "appPrincipalId" else "Reader"
    assert scoped == {("queues", "queueNames", f"storageQueueData{verb}"),
                      ("poisonQueues", "queueNames", f"storageQueueData{verb}"),
                      ("tables", "tableNames", f"storageTableData{verb}")}
    account = {a.role for a in storage if a.scope == "storage"}
    # What must stay account-wide (docs/security.md): the host's blobs, and sending (only) to
    # the reply_to queues under a condition; for the deploying user, nothing.
    assert account == ({"storageBlobDataOwner", "storageQueueDataMessageSender"}
                       if principal == "appPrincipalId" else set())


def _reply_condition(prefixes: list[str]) -> str:
    reply = next(a for a in ASSIGNMENTS if a.role == "storageQueueDataMessageSender")
    assert reply.body["properties"]["conditionVersion"] == "2.0"
    text = _Resolver(RBAC, INFRA / "app", {"replyQueuePrefixes": prefixes})(
        reply.body["properties"]["condition"])
    return str(text).replace("\\'", "'")


def _grants_add(condition: str, queue: str) -> bool:
    """The condition's answer for putting a message on ``queue``: it has this one shape."""
    m = re.fullmatch(r"\(\(!\(ActionMatches\{'Microsoft\.Storage/storageAccounts/queueServices/"
                     r"queues/messages/add/action'\}\)\) OR \((.+)\)\)", condition)
    assert m, condition
    named = "@Resource[Microsoft.Storage/storageAccounts/queueServices/queues:name]"
    clauses = m.group(1).split(" OR ")
    prefixes = []
    for clause in clauses:
        c = re.fullmatch(re.escape(named) + r" StringStartsWith '([a-z0-9-]+)'", clause)
        assert c, clause
        prefixes.append(c.group(1))
    return any(queue.startswith(p) for p in prefixes)


def test_the_app_sends_status_updates_only_to_queues_under_the_allow_list() -> None:
    """The Bicep's ReplyQueueAllowList and the condition come from one list: the app may put a
    message on a queue an order may name, and on no other queue outside its own."""
    prefixes = MAIN_RESOLVE("replyQueuePrefixes")
    setting = MAIN_RESOLVE(MAIN["variables"]["appSettings"]["value"])["ReplyQueueAllowList"]
    assert list(reply_prefixes(setting)) == prefixes == ["order-status-"]
    condition = _reply_condition(prefixes)
    assert _grants_add(condition, "order-status-shop1")
    for queue in [*MAIN_RESOLVE("appQueueNames"), "orders", "other-app-queue",
                  "azure-webjobs-blobtrigger-x", "xorder-status-1"]:
        assert not _grants_add(condition, queue), queue
    # each prefix of a longer list is a clause of its own
    two = _reply_condition(["order-status-", "shop-"])
    assert _grants_add(two, "shop-1") and not _grants_add(two, "shop")
    # no prefix: no assignment at all
    reply = RBAC["resources"]["appReplyQueues"]["config"]["condition"]
    assert reply == {"operator": {"type": "not", "operands": {"bool_value": {
        "function": {"type": "empty", "parameters": {"item_to_test": "replyQueuePrefixes"}}}}}}
    assert RBAC_PARAMS["replyQueuePrefixes"] == "replyQueuePrefixes"


def test_service_bus_roles_are_on_the_orders_queue_alone() -> None:
    """The app receives from it (Data Owner: the scale controller needs Manage rights to read
    its length); the deploying user sends to it (orders send). Neither on the namespace."""
    bus = {(a.principal, a.role, a.scope) for a in ASSIGNMENTS if a.role.startswith("serviceBus")}
    assert bus == {("appPrincipalId", "serviceBusDataOwner", "ordersQueue"),
                   ("userPrincipalId", "serviceBusDataSender", "ordersQueue")}


def test_every_role_the_app_and_the_user_are_given_is_one_security_md_names() -> None:
    """The table in docs/security.md, "What the app's identity can reach", whole: a role added
    here without a line there fails."""
    given = {(a.principal, a.role, a.scope) for a in ASSIGNMENTS}
    assert given == {
        ("appPrincipalId", "storageQueueDataContributor", "queues"),
        ("appPrincipalId", "storageQueueDataContributor", "poisonQueues"),
        ("appPrincipalId", "storageTableDataContributor", "tables"),
        ("appPrincipalId", "storageBlobDataOwner", "storage"),
        ("appPrincipalId", "storageQueueDataMessageSender", "storage"),
        ("appPrincipalId", "serviceBusDataOwner", "ordersQueue"),
        ("appPrincipalId", "monitoringMetricsPublisher", "applicationInsights"),
        ("userPrincipalId", "storageQueueDataReader", "queues"),
        ("userPrincipalId", "storageQueueDataReader", "poisonQueues"),
        ("userPrincipalId", "storageTableDataReader", "tables"),
        ("userPrincipalId", "serviceBusDataSender", "ordersQueue")}
    page = " ".join((ROOT / "docs" / "security.md").read_text().split())
    for role in ("Storage Queue Data Contributor", "Storage Table Data Contributor",
                 "Storage Blob Data Owner", "Storage Queue Data Message Sender",
                 "Azure Service Bus Data Owner", "Monitoring Metrics Publisher",
                 "Storage Queue Data Reader", "Storage Table Data Reader",
                 "Azure Service Bus Data Sender"):
        assert role in page, role


def test_the_deploying_user_reads_queue_lengths_never_a_message() -> None:
    """An Agent's request carries its attempt's token, which answers for the Agent: the user's
    queue reader role is held from peeking (the one message-reading action it has)."""
    user_queues = [a for a in ASSIGNMENTS
                   if a.principal == "userPrincipalId" and a.role == "storageQueueDataReader"]
    assert {a.scope for a in user_queues} == {"queues", "poisonQueues"}
    condition = str(_Resolver(RBAC, INFRA / "app")("userQueueNoPeek"))
    for a in user_queues:
        props = a.body["properties"]
        assert (props["conditionVersion"], props["condition"]) == ("2.0", "userQueueNoPeek")
    assert condition.replace("\\'", "'") == (
        "((!(ActionMatches{'Microsoft.Storage/storageAccounts/queueServices/queues/"
        "messages/read'})))")
