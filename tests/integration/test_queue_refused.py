"""A send the app's role does not allow (403) is told apart from a missing queue, and a status
update refused so never stops the order: the reply queue's role is narrower than the setting
that lets an order name it (infra/app/rbac.bicep's condition). Against Azurite."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from azure.storage.queue import QueueSasPermissions, QueueServiceClient, generate_queue_sas

from shared.adapters.queues import QueueNotFound, QueueRefused, StorageQueueSender


def _parts(connection: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in connection.split(";") if p)


def test_a_send_the_role_refuses_is_a_refusal_not_a_missing_queue(
        app_env: Callable[..., dict[str, str]]) -> None:
    env = app_env()
    connection = env["AzureWebJobsStorage"]
    service = QueueServiceClient.from_connection_string(connection)
    name = f"order-status-{uuid.uuid4().hex[:8]}"
    service.create_queue(name)
    parts = _parts(connection)
    # A credential that may read the queue but not add to it: as the app's role is to a queue
    # outside its condition's prefixes.
    sas = generate_queue_sas(parts["AccountName"], name, parts["AccountKey"],
                             permission=QueueSasPermissions(read=True),
                             expiry=datetime.now(UTC) + timedelta(hours=1))
    read_only = QueueServiceClient(service.url, credential=sas)
    with pytest.raises(QueueRefused, match=name):
        StorageQueueSender(read_only).send(name, "status")
    with pytest.raises(QueueNotFound):
        StorageQueueSender(service).send(f"{name}-gone", "status")
    assert not list(service.get_queue_client(name).peek_messages())
