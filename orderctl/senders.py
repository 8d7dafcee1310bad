"""Where `orders send` delivers: Service Bus (key or Entra ID), or the local channel."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, Protocol

APP_PROPERTIES = {"source": "orders-cli", "schema_version": 1}


class OrderSender(Protocol):
    def send(self, items: Iterable[tuple[str | None, bytes]]) -> list[str]: ...
    def close(self) -> None: ...


class ServiceBusSender:
    def __init__(self, queue: str, *, connection_string: str | None = None,
                 namespace: str | None = None) -> None:
        from azure.servicebus import ServiceBusClient

        if connection_string:
            self._client = ServiceBusClient.from_connection_string(connection_string)
        else:
            from azure.identity import DefaultAzureCredential

            fqns = namespace or ""
            if "." not in fqns:
                fqns = f"{fqns}.servicebus.windows.net"
            self._client = ServiceBusClient(fqns, DefaultAzureCredential())
        self._sender = self._client.get_queue_sender(queue)

    def send(self, items: Iterable[tuple[str | None, bytes]]) -> list[str]:
        from azure.servicebus import ServiceBusMessage

        ids = []
        for oid, body in items:
            # MessageId = order id, so Service Bus duplicate detection drops a resend.
            mid = oid or uuid.uuid4().hex
            self._sender.send_messages(ServiceBusMessage(
                body, message_id=mid, content_type="application/json",
                application_properties=dict(APP_PROPERTIES)))
            ids.append(mid)
        return ids

    def close(self) -> None:
        self._sender.close()
        self._client.close()


class LocalSender:
    def __init__(self, queues: Any, orders_queue: str) -> None:
        from localrun.servicebus import LocalServiceBusChannel

        self._channel = LocalServiceBusChannel(queues, orders_queue)
        self._channel.ensure()

    def send(self, items: Iterable[tuple[str | None, bytes]]) -> list[str]:
        return [self._channel.send(body, message_id=oid, application_properties=dict(
            APP_PROPERTIES)) for oid, body in items]

    def close(self) -> None:
        pass
