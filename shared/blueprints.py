"""The app's functions in groups that function_app.py registers: the Agents, the operator API,
the simulated services.

One queue-triggered Agent per service the workflows call, built from the registered workflows
rather than written out one by one: a static name (``<service>_agent``) and its queue from an
app setting (``%<Service>RequestsQueueName%``), so the host indexes each as it would a function
written by hand. Adding a service to a workflow adds its Agent here.
"""

from __future__ import annotations

import azure.functions as func

from shared import entrypoints
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
        entrypoints.agent(service, msg, reply)


def operator_api() -> func.Blueprint:
    """The operator's HTTP routes: orders, resubmit, rejections, the console, health.

    The operator routes are anonymous to the host on purpose: the operator is a person (or a
    tool) with an Entra ID identity, not a key holder. App Service Authentication signs them in
    and the app refuses any request without a principal holding the route's app role
    (entrypoints._as_operator), so a function or host key opens none of them. Only the machine
    routes (health, openapi) keep a function key.
    """
    bp = func.Blueprint()  # type: ignore[no-untyped-call]

    @bp.function_name("get_order")
    @bp.route(route="orders/{order_id}", methods=["GET"],
              auth_level=func.AuthLevel.ANONYMOUS)
    def get_order(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.get_order(req)

    @bp.function_name("list_orders")
    @bp.route(route="orders", methods=["GET"],
              auth_level=func.AuthLevel.ANONYMOUS)
    def list_orders(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.list_orders(req)

    @bp.function_name("resubmit_order")
    @bp.route(route="orders/{order_id}/resubmit", methods=["POST"],
              auth_level=func.AuthLevel.ANONYMOUS)
    def resubmit_order(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.resubmit_order(req)

    @bp.function_name("resubmit_orders")
    @bp.route(route="resubmissions", methods=["POST"],
              auth_level=func.AuthLevel.ANONYMOUS)
    def resubmit_orders(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.resubmit_orders(req)

    @bp.function_name("list_rejected")
    @bp.route(route="rejected", methods=["GET"],
              auth_level=func.AuthLevel.ANONYMOUS)
    def list_rejected(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.list_rejected(req)

    @bp.function_name("list_alerts")
    @bp.route(route="alerts", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def list_alerts(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.list_alerts(req)

    @bp.function_name("ack_alert")
    @bp.route(route="alerts/{alert_id}/ack", methods=["POST"],
              auth_level=func.AuthLevel.ANONYMOUS)
    def ack_alert(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.ack_alert(req)

    @bp.function_name("overview")
    @bp.route(route="overview", methods=["GET"],
              auth_level=func.AuthLevel.ANONYMOUS)
    def overview(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.overview(req)

    @bp.function_name("console")
    @bp.route(route="console", methods=["GET"],
              auth_level=func.AuthLevel.ANONYMOUS)
    def console(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.console(req)

    @bp.function_name("openapi")
    @bp.route(route="openapi.json", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
    def openapi(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.openapi(req)

    @bp.function_name("health")
    @bp.route(route="health", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
    def health(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.health(req)

    @bp.function_name("health_details")
    @bp.route(route="health/details", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def health_details(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.health_details(req)

    return bp


def simulators() -> func.Blueprint:
    """The simulated remote services (SimulatorsEnabled): every service's operations."""
    bp = func.Blueprint()  # type: ignore[no-untyped-call]

    # A provider-shaped API per code service (an API key as a bearer token, which it checks
    # itself, as a provider does), for code services to call locally. Its literal route
    # segment takes precedence over simulated_service's parameter.
    @bp.function_name("simulated_provider")
    @bp.route(route="sim/provider/{service}/{call}", methods=["POST"],
              auth_level=func.AuthLevel.ANONYMOUS)
    def simulated_provider(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.simulated_provider(req)

    @bp.function_name("simulated_service")
    @bp.route(route="sim/{service}/{operation}", methods=["POST"],
              auth_level=func.AuthLevel.FUNCTION)
    def simulated_service(req: func.HttpRequest) -> func.HttpResponse:
        return entrypoints.simulated_service(req)

    return bp


def pipeline() -> func.Blueprint:
    """The pattern's own functions, whatever the workflows: intake from the orders queue, the
    Scheduler's two queues, the Supervisor's timer."""
    bp = func.Blueprint()  # type: ignore[no-untyped-call]

    @bp.function_name("intake")
    @bp.service_bus_queue_trigger(arg_name="msg", queue_name="%OrdersQueueName%",
                                  connection="ServiceBusConnection")
    def intake(msg: func.ServiceBusMessage) -> None:
        entrypoints.intake(msg)

    @bp.function_name("scheduler_commands")
    @bp.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                      connection="AzureWebJobsStorage")
    def scheduler_commands(msg: func.QueueMessage) -> None:
        entrypoints.scheduler_command(msg)

    @bp.function_name("scheduler_replies")
    @bp.queue_trigger(arg_name="msg", queue_name="%AgentResponsesQueueName%",
                      connection="AzureWebJobsStorage")
    def scheduler_replies(msg: func.QueueMessage) -> None:
        entrypoints.scheduler_reply(msg)

    @bp.function_name("supervisor")
    @bp.timer_trigger(arg_name="timer", schedule="%SupervisorSchedule%", run_on_startup=False,
                      use_monitor=True)
    def supervisor(timer: func.TimerRequest) -> None:
        entrypoints.supervisor(timer)

    return bp
