"""Sending to Storage queues in the encoding the Functions host expects (base64)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Protocol

from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue import QueueClient, QueueServiceClient, TextBase64EncodePolicy


class QueueNotFound(Exception):
    """The queue does not exist: sending again will not help."""


class MessageSender(Protocol):
    def send(self, queue: str, body: str, delay: timedelta = timedelta(0)) -> None:
        """Send a message, visible after ``delay``; raise QueueNotFound for a missing queue."""
        ...


class StorageQueueSender:
    def __init__(self, service: QueueServiceClient) -> None:
        self._service = service
        self._clients: dict[str, QueueClient] = {}
        self._lock = threading.Lock()

    def client(self, queue: str) -> QueueClient:
        with self._lock:
            if queue not in self._clients:
                self._clients[queue] = self._service.get_queue_client(
                    queue, message_encode_policy=TextBase64EncodePolicy()
                )
            return self._clients[queue]

    def send(self, queue: str, body: str, delay: timedelta = timedelta(0)) -> None:
        seconds = max(0, int(delay.total_seconds() + 0.999))  # the service counts whole seconds
        try:
            self.client(queue).send_message(body, visibility_timeout=seconds or None)
        except ResourceNotFoundError as e:
            raise QueueNotFound(f"queue {queue!r} does not exist") from e
