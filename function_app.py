"""The front door: each function's trigger and bindings, and one call into the package.

Names of queues, tables and connections come from app settings (see README, Settings).
"""

import azure.functions as func

from shared import blueprints, bootstrap, entrypoints
from shared.workflows import REGISTRY

bootstrap.configure(REGISTRY)
settings = entrypoints.check_settings()

app = func.FunctionApp()
# One Agent per service the workflows call (shared/blueprints.py).
app.register_functions(blueprints.agents(REGISTRY.services))
app.register_functions(blueprints.operator_api())
# Fault-injecting services are indexed only where asked for: local runs and demo deployments.
if settings.simulators_enabled:
    app.register_functions(blueprints.simulators())


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
