"""A local stand-in for the Service Bus orders queue, kept in an Azurite Storage queue.

There is no Service Bus broker on a laptop without Docker, so the local host feeds the Service Bus
trigger from this channel. Each message is an envelope that carries what the trigger needs to
build a real ``azure.functions.ServiceBusMessage``: message id, body, content type and application
properties; the delivery count is the queue's dequeue count. After ``max_delivery_count`` failed
deliveries a message moves to ``<queue>-deadletter``, as Service Bus would dead-letter it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from azure.core.exceptions import ResourceExistsError
from azure.functions.servicebus import ServiceBusMessage
from azure.storage.queue import QueueClient, QueueMessage, QueueServiceClient

DEADLETTER_SUFFIX = "-deadletter"


def local_queue_name(orders_queue: str) -> str:
    # Service Bus allows names that Storage queues do not (upper case, dots, underscores).
    name = "".join(c if c.isalnum() else "-" for c in orders_queue.lower()).strip("-")
    return (name + "-sb-local")[:63]


@dataclass(frozen=True)
class LocalServiceBusChannel:
    service: QueueServiceClient
    orders_queue: str

    @property
    def queue(self) -> QueueClient:
        return self.service.get_queue_client(local_queue_name(self.orders_queue))

    @property
    def deadletter(self) -> QueueClient:
        return self.service.get_queue_client(
            local_queue_name(self.orders_queue)[: 63 - len(DEADLETTER_SUFFIX)] + DEADLETTER_SUFFIX
        )

    def ensure(self) -> None:
        for q in (self.queue, self.deadletter):
            with contextlib.suppress(ResourceExistsError):
                q.create_queue()

    def send(self, body: bytes | str, *, message_id: str | None = None,
             content_type: str = "application/json",
             application_properties: dict[str, Any] | None = None) -> str:
        raw = body.encode() if isinstance(body, str) else body
        mid = message_id or uuid.uuid4().hex
        envelope = {
            "message_id": mid,
            "body": base64.b64encode(raw).decode(),
            "content_type": content_type,
            "application_properties": application_properties or {},
            "enqueued_time_utc": datetime.now(UTC).isoformat(),
        }
        self.queue.send_message(json.dumps(envelope))
        return mid

    def dead_lettered(self) -> list[dict[str, Any]]:
        return [json.loads(m.content) for m in self.deadletter.peek_messages(max_messages=32)]


def to_service_bus_message(m: QueueMessage) -> ServiceBusMessage:
    env = json.loads(m.content)
    props = env.get("application_properties") or {}
    enqueued = datetime.fromisoformat(env["enqueued_time_utc"])
    return ServiceBusMessage(
        body=base64.b64decode(env["body"]),
        message_id=env["message_id"],
        content_type=env.get("content_type"),
        delivery_count=m.dequeue_count,
        enqueued_time_utc=enqueued,
        lock_token=m.pop_receipt,
        application_properties=props,
        user_properties=props,
        trigger_metadata={"MessageId": env["message_id"], "DeliveryCount": m.dequeue_count},
    )
