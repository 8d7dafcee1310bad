"""The message contracts: the order message as JSON Schema and every queue as AsyncAPI 3.

Both come from the models the code parses and writes messages with (each workflow's message
model, shared/domain/messages.py); ``python -m shared.contracts`` writes them to schemas/, and a
test fails when the files and the code differ.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from shared.contracts.openapi import VERSION
from shared.domain.messages import AgentReply, AgentRequest, SchedulerCommand, StatusUpdate
from shared.domain.workflow import Registry
from shared.settings import service_setting_names

ORDER_SCHEMA_ID = "https://github.com/order-pipeline/order-pipeline/schemas/order.schema.json"
_REF = "#/components/schemas/{model}"


def _models(workflows: Registry) -> list[type[BaseModel]]:
    """Each distinct message model of the workflows, the default workflow's first."""
    models: list[type[BaseModel]] = [workflows.get().message]
    for w in workflows.workflows:
        if w.message not in models:
            models.append(w.message)
    return models


def _tied(model: type[BaseModel], workflows: Registry, schema: dict[str, Any]) -> None:
    """``schema`` (``model``'s) made to say which workflows read a message by it, as intake
    does: ``workflow`` names one of them, and may be left out only where the default
    workflow's model is this one. So a message of one workflow that forgot to name it is
    refused by the schema too, not taken for another's."""
    names = [w for w in workflows.names if workflows.get(w).message is model]
    default = workflows.get().message is model
    named: dict[str, Any] = {"enum": names, "title": "Workflow"}
    schema["properties"]["workflow"] = (
        {"anyOf": [{"enum": names}, {"type": "null"}], "default": None, "title": "Workflow"}
        if default else named)
    if not default:
        schema["required"] = sorted({*schema.get("required", []), "workflow"})


def order_schema(workflows: Registry) -> dict[str, Any]:
    """Every order message, as intake validates it: the model of the workflow it names (the
    default workflow's when it names none)."""
    models = _models(workflows)
    schemas, defs = [], {}
    for m in models:
        schema = m.model_json_schema(mode="validation")
        defs.update(schema.pop("$defs", {}))
        _tied(m, workflows, schema)
        schemas.append(schema)
    body: dict[str, Any] = (schemas[0] if len(schemas) == 1
                            else {"title": "Order", "oneOf": schemas})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": ORDER_SCHEMA_ID,
        **({"$defs": defs} if defs else {}),
        **body,
        "description": "An order message on the orders queue (Service Bus), UTF-8 JSON, in "
                       "the message model of the workflow it names (the default workflow's "
                       "when it names none). Fields not listed are refused, and the message "
                       "is recorded as rejected with the reason; put your own data in the "
                       "message's application properties instead, which intake does not "
                       "read.",
    }


def _message(model: type[BaseModel] | list[type[BaseModel]], title: str,
             summary: str) -> dict[str, Any]:
    models = model if isinstance(model, list) else [model]
    refs: list[dict[str, Any]] = [{"$ref": _REF.format(model=m.__name__)} for m in models]
    return {"name": models[0].__name__ if len(models) == 1 else "Order", "title": title,
            "summary": summary, "contentType": "application/json",
            # A workflow with a message model of its own adds one of its own here.
            "payload": refs[0] if len(refs) == 1 else {"oneOf": refs}}


def _storage_queue(setting: str, message: str, description: str) -> dict[str, Any]:
    return {
        "address": f"%{setting}%",
        "title": setting,
        "description": f"{description} A Storage queue named by the app setting {setting}; "
                       "bodies are base64-encoded UTF-8 JSON, as the Functions host reads them.",
        "servers": [{"$ref": "#/servers/storageQueues"}],
        "messages": {message: {"$ref": f"#/components/messages/{message}"}},
    }


def _operation(action: str, channel: str, message: str, summary: str) -> dict[str, Any]:
    return {"action": action, "summary": summary,
            "channel": {"$ref": f"#/channels/{channel}"},
            "messages": [{"$ref": f"#/channels/{channel}/messages/{message}"}]}


def asyncapi_document(workflows: Registry) -> dict[str, Any]:
    models: list[type[BaseModel]] = [*_models(workflows), SchedulerCommand, AgentRequest,
                                     AgentReply, StatusUpdate]
    _, defs = models_json_schema(
        [(m, "validation") for m in models], ref_template=_REF)
    for m in _models(workflows):
        _tied(m, workflows, defs["$defs"][m.__name__])
    agents = workflows.services  # in the order the workflows' steps first name them
    channels: dict[str, Any] = {
        "orders": {
            "address": "%OrdersQueueName%",
            "title": "OrdersQueueName",
            "description": "Orders from senders: a Service Bus queue named by the app setting "
                           "OrdersQueueName. Send with a message id (the order id is a good "
                           "one); a message that is not a valid order is recorded as rejected "
                           "with the reason and completed, not retried.",
            "servers": [{"$ref": "#/servers/serviceBus"}],
            "messages": {"order": {"$ref": "#/components/messages/order"}},
        },
        "schedulerCommands": _storage_queue(
            "SchedulerQueueName", "schedulerCommand",
            "Start or compensate an order: sent by the Supervisor and the operator (intake "
            "hands a new order's start to the Scheduler in its own invocation)."),
        "agentResponses": _storage_queue(
            "AgentResponsesQueueName", "agentReply",
            "Agents' replies to the Scheduler, one per request that got an answer in time."),
        "statusUpdates": {
            "address": "{replyTo}",
            "title": "Status updates",
            "description": "What happened to an order, sent to the Storage queue its sender "
                           "named in reply_to (under a ReplyQueueAllowList prefix, never a "
                           "queue the app reads). Each update may "
                           "arrive more than once: drop a copy whose event_id you have seen.",
            "parameters": {"replyTo": {"description": "The order's reply_to."}},
            "servers": [{"$ref": "#/servers/storageQueues"}],
            "messages": {"statusUpdate": {"$ref": "#/components/messages/statusUpdate"}},
        },
    }
    operations: dict[str, Any] = {
        "receiveOrder": _operation("receive", "orders", "order",
                                   "Intake validates and stores each order."),
        "sendSchedulerCommand": _operation("send", "schedulerCommands", "schedulerCommand",
                                           "Hand an order to a Scheduler."),
        "receiveSchedulerCommand": _operation("receive", "schedulerCommands",
                                              "schedulerCommand", "A Scheduler claims it."),
        "sendAgentReply": _operation("send", "agentResponses", "agentReply",
                                     "An Agent answers, before the step's complete-by time."),
        "receiveAgentReply": _operation("receive", "agentResponses", "agentReply",
                                        "The Scheduler records the outcome and moves on."),
        "sendStatusUpdate": _operation("send", "statusUpdates", "statusUpdate",
                                       "Tell the order's sender what happened."),
    }
    for agent in agents:
        cid = f"{agent}Requests"
        channels[cid] = _storage_queue(
            service_setting_names(agent)[1], "agentRequest",
            f"Work for the {agent} Agent (a step to do, or to undo under its recorded key).")
        operations[f"send{agent.capitalize()}Request"] = _operation(
            "send", cid, "agentRequest", f"The Scheduler hands a step to the {agent} Agent.")
        operations[f"receive{agent.capitalize()}Request"] = _operation(
            "receive", cid, "agentRequest", f"The {agent} Agent calls its service.")
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Order pipeline messages",
            "version": VERSION,
            "description": "Every queue the order pipeline reads or writes. Each message "
                           "carries schema_version; readers of the internal queues ignore "
                           "fields they do not know, so a newer sender can add one.",
        },
        "defaultContentType": "application/json",
        "servers": {
            "serviceBus": {"host": "{namespace}.servicebus.windows.net", "protocol": "amqp",
                           "description": "The orders namespace (Standard tier or above).",
                           "variables": {"namespace": {"description": "Its name."}}},
            "storageQueues": {"host": "{account}.queue.core.windows.net", "protocol": "https",
                              "description": "The app's storage account (AzureWebJobsStorage).",
                              "variables": {"account": {"description": "Its name."}}},
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "messages": {
                "order": _message(_models(workflows), "Order",
                                  "An order to process, in its workflow's message model."),
                "schedulerCommand": _message(SchedulerCommand, "Scheduler command",
                                             "Start or compensate an order."),
                "agentRequest": _message(AgentRequest, "Agent request",
                                         "Do or undo one step, by a complete-by time."),
                "agentReply": _message(AgentReply, "Agent reply", "How a step attempt ended."),
                "statusUpdate": _message(StatusUpdate, "Status update",
                                         "An event in an order's life."),
            },
            "schemas": defs["$defs"],
        },
    }
