"""One queue-triggered Agent per service the workflows call, built from the registered
workflows rather than written out one by one: a static name (``<service>_agent``) and its queue
from an app setting (``%<Service>RequestsQueueName%``), so the host indexes each as it would a
function written by hand. Adding a service to a workflow adds its Agent here.
"""

from __future__ import annotations

import azure.functions as func

from shared import bootstrap
from shared.domain.workflow import agent_function
from shared.settings import service_setting_names


def agents(services: list[str]) -> func.Blueprint:
    bp = func.Blueprint()  # type: ignore[no-untyped-call]
    for service in services:
        _agent(bp, service)
    return bp


def _agent(bp: func.Blueprint, service: str) -> None:
    _, queue_setting = service_setting_names(service)

    @bp.function_name(agent_function(service))
    @bp.queue_trigger(arg_name="msg", queue_name=f"%{queue_setting}%",
                      connection="AzureWebJobsStorage")
    @bp.queue_output(arg_name="reply", queue_name="%AgentResponsesQueueName%",
                     connection="AzureWebJobsStorage")
    def agent(msg: func.QueueMessage, reply: func.Out[str]) -> None:
        answer = bootstrap.container().agents[service].handle(msg.get_body().decode())
        if answer is not None:
            reply.set(answer.to_json())
