"""The pattern's own functions, whatever the workflows: intake from the orders queue (Service
Bus) and from each declared sender's, the Scheduler's two queues, the Supervisor's timer, and
the re-drive runner's (shared/handlers/redrive.py).

An exception leaves each on purpose: the host then retries the message (and in the end moves it
to the poison or dead-letter queue), which is what a fault nobody expected should get.
"""

from __future__ import annotations

from datetime import UTC

import azure.functions as func

from shared import bootstrap, tracing
from shared.domain import senders
from shared.domain.senders import Sender
from shared.handlers import redrive


def pipeline(declared: tuple[Sender, ...] = ()) -> func.Blueprint:
    """``declared``: the senders, each with an intake of its own on its own queue."""
    bp = func.Blueprint()  # type: ignore[no-untyped-call]
    _intake(bp, senders.DEFAULT, "%OrdersQueueName%")
    for sender in declared:
        _intake(bp, sender, sender.orders_queue)

    @bp.function_name("scheduler_commands")
    @bp.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                      connection="AzureWebJobsStorage")
    def scheduler_commands(msg: func.QueueMessage) -> None:
        bootstrap.container().scheduler.handle_command(msg.get_body().decode(),
                                                       _redelivered(msg))

    @bp.function_name("scheduler_replies")
    @bp.queue_trigger(arg_name="msg", queue_name="%AgentResponsesQueueName%",
                      connection="AzureWebJobsStorage")
    def scheduler_replies(msg: func.QueueMessage) -> None:
        bootstrap.container().scheduler.handle_reply(msg.get_body().decode(), _redelivered(msg))

    @bp.function_name("supervisor")
    @bp.timer_trigger(arg_name="timer", schedule="%SupervisorSchedule%", run_on_startup=False,
                      use_monitor=True)
    def supervisor(timer: func.TimerRequest) -> None:
        bootstrap.container().supervisor.tick()

    @bp.function_name("redrive_runner")
    @bp.timer_trigger(arg_name="timer", schedule=redrive.SCHEDULE, run_on_startup=False,
                      use_monitor=False)
    def redrive_runner(timer: func.TimerRequest) -> None:
        bootstrap.container().redriver.run(redrive.RUN_SECONDS)

    return bp


def _intake(bp: func.Blueprint, sender: Sender, queue: str) -> None:
    @bp.function_name(sender.intake_function)
    @bp.service_bus_queue_trigger(arg_name="msg", queue_name=queue,
                                  connection="ServiceBusConnection")
    def intake(msg: func.ServiceBusMessage) -> None:
        sent = msg.enqueued_time_utc  # naive UTC, as the worker gives it
        props = msg.application_properties or {}
        bootstrap.container().intake.handle(
            msg.message_id, msg.get_body(), msg.delivery_count or 1,
            sent.replace(tzinfo=UTC) if sent else None,
            # The sender's trace context: ours, or the one the Service Bus SDK sets when traced.
            _text(props.get(tracing.TRACEPARENT) or props.get("Diagnostic-Id")),
            sender=sender)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _redelivered(msg: func.QueueMessage) -> bool:
    return (msg.dequeue_count or 1) > 1
