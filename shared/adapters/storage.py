"""Storage clients from settings: a connection string locally, the managed identity in Azure."""

from __future__ import annotations

from typing import Any

from azure.data.tables import TableServiceClient
from azure.storage.queue import QueueServiceClient

from shared.settings import Settings, SettingsError


def _credential(settings: Settings) -> Any:
    # Imported lazily: local runs never need azure-identity's start-up cost.
    from azure.identity import DefaultAzureCredential, ManagedIdentityCredential

    if settings.storage_client_id:
        return ManagedIdentityCredential(client_id=settings.storage_client_id)
    return DefaultAzureCredential()


def _endpoint(settings: Settings, service: str, explicit: str | None) -> str:
    if explicit:
        return explicit
    if settings.storage_account_name:
        return f"https://{settings.storage_account_name}.{service}.core.windows.net"
    raise SettingsError(f"AzureWebJobsStorage__{service}ServiceUri or __accountName is needed")


def table_service(settings: Settings, **kwargs: Any) -> TableServiceClient:
    conn = settings.effective_storage_connection
    if conn:
        return TableServiceClient.from_connection_string(conn, **kwargs)
    return TableServiceClient(
        endpoint=_endpoint(settings, "table", settings.table_service_uri),
        credential=_credential(settings), **kwargs,
    )


def queue_service(settings: Settings, **kwargs: Any) -> QueueServiceClient:
    conn = settings.effective_storage_connection
    if conn:
        return QueueServiceClient.from_connection_string(conn, **kwargs)
    return QueueServiceClient(
        account_url=_endpoint(settings, "queue", settings.queue_service_uri),
        credential=_credential(settings), **kwargs,
    )
