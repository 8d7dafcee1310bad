"""A local stand-in for the Service Bus orders queue, kept in an Azurite Storage queue.

There is no Service Bus broker on a laptop without Docker, so the local host feeds the Service Bus
trigger from this channel. Each message is an envelope that carries what the host would send the
worker for it: message id, body, content type, application properties, when it was enqueued, its
sequence number and time to live; the delivery count is the queue's dequeue count. After
``max_delivery_count`` failed deliveries a message moves to ``<queue>-deadletter``, as Service Bus
would dead-letter it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.core.exceptions import ResourceExistsError
from azure.storage.queue import QueueClient, QueueServiceClient

LOCAL_SUFFIX = "-sb-local"
DEADLETTER_SUFFIX = "-deadletter"
# The orders queue's defaultMessageTimeToLive in the Bicep.
DEFAULT_TTL = timedelta(days=7)
_MAX_NAME = 63  # a Storage queue name's limit


def _base(orders_queue: str) -> str:
    # Service Bus allows names that Storage queues do not (upper case, dots, underscores).
    return "".join(c if c.isalnum() else "-" for c in orders_queue.lower()).strip("-")


def local_queue_name(orders_queue: str) -> str:
    # The name gives way to the suffix, never the suffix to the name: the suffix is how the
    # storage meter tells the stand-in's requests from the app's (is_local_service_bus).
    return _base(orders_queue)[: _MAX_NAME - len(LOCAL_SUFFIX)] + LOCAL_SUFFIX


def local_deadletter_name(orders_queue: str) -> str:
    keep = _MAX_NAME - len(LOCAL_SUFFIX) - len(DEADLETTER_SUFFIX)
    return _base(orders_queue)[:keep] + LOCAL_SUFFIX + DEADLETTER_SUFFIX


def is_local_service_bus(queue_name: str) -> bool:
    """A Storage queue that stands in for Service Bus: in Azure its requests are Service Bus
    operations, not storage transactions."""
    return queue_name.endswith((LOCAL_SUFFIX, LOCAL_SUFFIX + DEADLETTER_SUFFIX))


@dataclass(frozen=True)
class LocalServiceBusChannel:
    service: QueueServiceClient
    orders_queue: str

    @property
    def queue(self) -> QueueClient:
        return self.service.get_queue_client(local_queue_name(self.orders_queue))

    @property
    def deadletter(self) -> QueueClient:
        return self.service.get_queue_client(local_deadletter_name(self.orders_queue))

    def ensure(self) -> None:
        for q in (self.queue, self.deadletter):
            with contextlib.suppress(ResourceExistsError):
                q.create_queue()

    def send(self, body: bytes | str, *, message_id: str | None = None,
             content_type: str = "application/json",
             application_properties: dict[str, Any] | None = None) -> str:
        raw = body.encode() if isinstance(body, str) else body
        mid = message_id or uuid.uuid4().hex
        now = datetime.now(UTC)
        envelope = {
            "message_id": mid,
            "body": base64.b64encode(raw).decode(),
            "content_type": content_type,
            "application_properties": application_properties or {},
            "enqueued_time_utc": now.isoformat(),
            "sequence_number": time.time_ns() // 1000,
            "time_to_live_seconds": DEFAULT_TTL.total_seconds(),
        }
        self.queue.send_message(json.dumps(envelope))
        return mid

    def dead_lettered(self) -> list[dict[str, Any]]:
        return [json.loads(m.content) for m in self.deadletter.peek_messages(max_messages=32)]


@dataclass(frozen=True)
class ServiceBusEnvelope:
    """What the local channel keeps of a Service Bus message (the broker's view of it)."""

    message_id: str
    body: bytes
    content_type: str | None
    application_properties: dict[str, Any]
    enqueued_time_utc: datetime
    sequence_number: int
    time_to_live: timedelta

    @classmethod
    def parse(cls, content: str) -> ServiceBusEnvelope:
        env = json.loads(content)
        enqueued = datetime.fromisoformat(env["enqueued_time_utc"])
        return cls(
            message_id=env["message_id"], body=base64.b64decode(env["body"]),
            content_type=env.get("content_type"),
            application_properties=env.get("application_properties") or {},
            enqueued_time_utc=enqueued,
            # Service Bus numbers messages in the order it accepts them.
            sequence_number=int(env.get("sequence_number") or
                                int(enqueued.timestamp() * 1_000_000)),
            time_to_live=timedelta(seconds=float(env.get("time_to_live_seconds")
                                                 or DEFAULT_TTL.total_seconds())))
