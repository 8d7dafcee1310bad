"""The front door: each function's trigger and bindings, and one call into the package.

Names of queues, tables and connections come from app settings (see README, Settings).
"""

import azure.functions as func

from shared import blueprints, bootstrap, entrypoints
from shared.workflows import REGISTRY

bootstrap.configure(REGISTRY)
entrypoints.check_settings()

app = func.FunctionApp()
# One Agent per service the workflows call (shared/blueprints.py).
app.register_functions(blueprints.agents(REGISTRY.services))


@app.function_name("intake")
@app.service_bus_queue_trigger(arg_name="msg", queue_name="%OrdersQueueName%",
                               connection="ServiceBusConnection")
def intake(msg: func.ServiceBusMessage) -> None:
    entrypoints.intake(msg)


@app.function_name("scheduler_commands")
@app.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                   connection="AzureWebJobsStorage")
def scheduler_commands(msg: func.QueueMessage) -> None:
    entrypoints.scheduler_command(msg)


@app.function_name("scheduler_replies")
@app.queue_trigger(arg_name="msg", queue_name="%AgentResponsesQueueName%",
                   connection="AzureWebJobsStorage")
def scheduler_replies(msg: func.QueueMessage) -> None:
    entrypoints.scheduler_reply(msg)


@app.function_name("supervisor")
@app.timer_trigger(arg_name="timer", schedule="%SupervisorSchedule%", run_on_startup=False,
                   use_monitor=True)
def supervisor(timer: func.TimerRequest) -> None:
    entrypoints.supervisor(timer)


@app.function_name("get_order")
@app.route(route="orders/{order_id}", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def get_order(req: func.HttpRequest) -> func.HttpResponse:
    return entrypoints.get_order(req)


@app.function_name("list_orders")
@app.route(route="orders", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def list_orders(req: func.HttpRequest) -> func.HttpResponse:
    return entrypoints.list_orders(req)


@app.function_name("resubmit_order")
@app.route(route="orders/{order_id}/resubmit", methods=["POST"],
           auth_level=func.AuthLevel.ADMIN)
def resubmit_order(req: func.HttpRequest) -> func.HttpResponse:
    return entrypoints.resubmit_order(req)


@app.function_name("list_rejected")
@app.route(route="rejected", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def list_rejected(req: func.HttpRequest) -> func.HttpResponse:
    return entrypoints.list_rejected(req)


@app.function_name("overview")
@app.route(route="overview", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def overview(req: func.HttpRequest) -> func.HttpResponse:
    return entrypoints.overview(req)


@app.function_name("console")
@app.route(route="console", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def console(req: func.HttpRequest) -> func.HttpResponse:
    return entrypoints.console(req)


@app.function_name("openapi")
@app.route(route="openapi.json", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def openapi(req: func.HttpRequest) -> func.HttpResponse:
    return entrypoints.openapi(req)


@app.function_name("health")
@app.route(route="health", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def health(req: func.HttpRequest) -> func.HttpResponse:
    return entrypoints.health(req)


@app.function_name("simulated_service")
@app.route(route="sim/{service}/{operation}", methods=["POST"],
           auth_level=func.AuthLevel.FUNCTION)
def simulated_service(req: func.HttpRequest) -> func.HttpResponse:
    return entrypoints.simulated_service(req)
