"""Helpers for driving the registered functions directly with real trigger types."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from azure.functions.queue import QueueMessage
from azure.functions.servicebus import ServiceBusMessage
from azure.storage.queue import QueueClient, QueueServiceClient, TextBase64EncodePolicy

import function_app
from localrun.host.index import functions_of
from shared import bootstrap
from shared.adapters.queues import StorageQueueSender
from shared.domain.messages import SchedulerCommand


def function(name: str) -> Any:
    (f,) = [f for f in functions_of(function_app.app) if f.name == name]
    return f.call


def sb_message(body: bytes | str | dict[str, Any], message_id: str = "m-1",
               delivery_count: int = 1, enqueued: datetime | None = None,
               application_properties: dict[str, Any] | None = None) -> ServiceBusMessage:
    raw = json.dumps(body).encode() if isinstance(body, dict) else (
        body.encode() if isinstance(body, str) else body)
    return ServiceBusMessage(
        body=raw, message_id=message_id, delivery_count=delivery_count,
        enqueued_time_utc=(enqueued or datetime.now(UTC)).replace(tzinfo=None),
        application_properties=application_properties or {}, user_properties={},
        content_type="application/json")


def order(order_id: str = "o-1", **changes: Any) -> dict[str, Any]:
    return {"order_id": order_id, "customer_id": "c-1",
            "items": [{"sku": "A", "quantity": 2, "unit_price": "9.99"}], **changes}


def _queue(name: str) -> QueueClient:
    return QueueServiceClient.from_connection_string(
        bootstrap.container().settings.effective_storage_connection or ""
    ).get_queue_client(name, message_encode_policy=TextBase64EncodePolicy())


def enqueue(queue: str, body: str) -> None:
    """Send a message as the host expects it (base64), as another function or the host would."""
    _queue(queue).send_message(body)


def drain(queue: str) -> list[str]:
    """Receive and delete everything visible on a queue; decoded bodies."""
    q = _queue(queue)
    out = []
    for m in q.receive_messages(max_messages=32, messages_per_page=32):
        out.append(base64.b64decode(m.content).decode())
        q.delete_message(m)
    return out


def drain_json(queue: str) -> list[dict[str, Any]]:
    return [json.loads(b) for b in drain(queue)]


def queue_message(body: str, dequeue_count: int = 1) -> QueueMessage:
    return QueueMessage(id="q-1", body=body.encode(), dequeue_count=dequeue_count)


def entities(table: str, query: str = "", **params: Any) -> list[dict[str, Any]]:
    t = bootstrap.container().tables.get_table_client(table)
    if not query:
        return [dict(e) for e in t.list_entities()]
    return [dict(e) for e in t.query_entities(query, parameters=params)]


def race_on_save(stores: list[Any]) -> None:
    """Make these stores' writers read before any of them writes: a real race for the
    conditional write, instead of one finishing before the other starts."""
    import threading

    all_read = threading.Barrier(len(stores))
    for store in stores:
        real_save = store.save

        def save(state: Any, real_save: Any = real_save, **kw: Any) -> Any:
            all_read.wait(timeout=10)
            return real_save(state, **kw)

        store.save = save


def index_entries(env: dict[str, str]) -> list[dict[str, Any]]:
    """The due-time index's own entries (the Supervisor's tick log shares the table)."""
    return entities(env["InFlightTableName"],
                    "PartitionKey ge 'due-' and PartitionKey lt 'due.'")


def pending(order_id: str = "o-1", **changes: Any) -> str:
    """Store an order as intake does, but leave it Pending with its start command on the
    Scheduler's queue, as a resubmit or a Supervisor's rescue does; returns the command.

    (Intake itself hands its start to the Scheduler in the same invocation.)
    """
    c = bootstrap.container()

    class Enqueue:  # a Scheduler that leaves the command on its queue
        def take(self, cmd: SchedulerCommand, *_: Any, **__: Any) -> None:
            StorageQueueSender(c.queues).send(c.settings.scheduler_queue, cmd.to_json())

    taking = c.intake._scheduler
    c.intake._scheduler = Enqueue()
    try:
        function("intake")(msg=sb_message(order(order_id, **changes), message_id=order_id))
    finally:
        c.intake._scheduler = taking
    (cmd,) = [m for m in drain_json(c.settings.scheduler_queue) if m["order_id"] == order_id]
    return json.dumps(cmd)
