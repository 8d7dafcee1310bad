"""What each function in function_app.py calls: unwrap the trigger, call the handler.

Exceptions propagate on purpose: the host then retries the message (and in the end moves it to
the poison queue or the dead-letter queue), which is what we want for faults we did not expect.
"""

from __future__ import annotations

import json

import azure.functions as func

from shared import bootstrap
from shared.settings import load_settings


def check_settings() -> None:
    """Fail at start-up, naming the setting, rather than on the first message."""
    load_settings()


def intake(msg: func.ServiceBusMessage) -> None:
    bootstrap.container().intake.handle(msg.message_id, msg.get_body(), msg.delivery_count or 1)


def scheduler_command(msg: func.QueueMessage) -> None:
    bootstrap.container().scheduler.handle_command(msg.get_body().decode())


def scheduler_reply(msg: func.QueueMessage) -> None:
    bootstrap.container().scheduler.handle_reply(msg.get_body().decode())


def agent(name: str, msg: func.QueueMessage) -> None:
    bootstrap.container().agents[name].handle(msg.get_body().decode())


def supervisor(timer: func.TimerRequest) -> None:
    bootstrap.container().supervisor.tick()


def simulated_service(req: func.HttpRequest) -> func.HttpResponse:
    c = bootstrap.container()
    if not c.settings.simulators_enabled:
        return func.HttpResponse("simulated services are off (SimulatorsEnabled)", status_code=404)
    try:
        body = req.get_json() if req.get_body() else {}
    except ValueError:
        return func.HttpResponse('{"error": "body is not JSON"}', status_code=400,
                                 mimetype="application/json")
    r = c.simulator.handle(
        req.route_params.get("service", ""), req.route_params.get("operation", ""),
        req.headers.get("Idempotency-Key"), body if isinstance(body, dict) else {},
    )
    return func.HttpResponse(json.dumps(r.body), status_code=r.status, mimetype="application/json")
