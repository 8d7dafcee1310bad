"""Sending to Storage queues in the encoding the Functions host expects (base64)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Protocol

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.queue import QueueClient, QueueServiceClient, TextBase64EncodePolicy


class QueueNotFound(Exception):
    """The queue does not exist: sending again will not help."""


class QueueRefused(Exception):
    """The app's identity may not send to this queue (403): sending again will not help until
    an administrator changes the role. For a submitter's reply queue, its role condition names
    the allowed prefixes (infra/app/rbac.bicep, replyQueuePrefixes)."""


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
        except HttpResponseError as e:
            if e.status_code == 403:
                raise QueueRefused(f"the app may not send to queue {queue!r} "
                                   f"({getattr(e, 'error_code', None) or 'AuthorizationFailure'})"
                                   ) from e
            raise
