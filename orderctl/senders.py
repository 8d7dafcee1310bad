"""Where `orders send` delivers: Service Bus (key or Entra ID), or the local channel."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from opentelemetry.trace import SpanKind

from shared import tracing

APP_PROPERTIES: dict[str, str | int] = {"source": "orders-cli", "schema_version": 1}


@contextmanager
def _traced(order_id: str | None) -> Iterator[dict[str, str | int]]:
    """The message's application properties, with the trace context of a send span when
    tracing is on (OTEL_TRACES_EXPORTER): the order's trace then starts here."""
    with tracing.span("orders send", parent=None, kind=SpanKind.PRODUCER,
                      attributes=tracing.order_attributes(order_id)):
        tp = tracing.current_traceparent()
        yield {**APP_PROPERTIES, **({tracing.TRACEPARENT: tp} if tp else {})}


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
            with _traced(oid) as props:
                self._sender.send_messages(ServiceBusMessage(
                    body, message_id=mid, content_type="application/json",
                    application_properties={k: v for k, v in props.items()}))
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
        ids = []
        for oid, body in items:
            with _traced(oid) as props:
                ids.append(self._channel.send(body, message_id=oid,
                                              application_properties=props))
        return ids

    def close(self) -> None:
        pass
