"""Storage clients from settings: a connection string locally, the managed identity in Azure."""

from __future__ import annotations

import os
from typing import Any

import requests
from azure.core.pipeline.transport import RequestsTransport
from azure.data.tables import TableServiceClient
from azure.storage.queue import QueueServiceClient
from requests.adapters import HTTPAdapter

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


# Connections each storage client keeps. The SDK's default (requests' 10) is below what one
# instance runs at once: each queue function may hold batchSize + newBatchThreshold (24)
# messages, and every one of them reads and writes tables. A smaller pool opens and drops a
# connection per request over the limit, and logs "Connection pool is full" each time.
POOL_SIZE = 64
_PROXY_ENV = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def pooled_transport() -> RequestsTransport:
    session = requests.Session()
    # A session that trusts the environment looks for ~/.netrc and scans every variable for
    # proxies on each request: a tenth of the app's CPU per order in the bench's profile. Read
    # the CA bundle once instead, and trust the environment only for proxies, when one is set.
    session.trust_env = any(k in os.environ or k.upper() in os.environ for k in _PROXY_ENV)
    session.verify = (os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
                      or True)
    adapter = HTTPAdapter(pool_connections=POOL_SIZE, pool_maxsize=POOL_SIZE)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return RequestsTransport(session=session, session_owner=True)


def probe_options(seconds: float) -> dict[str, Any]:
    """Client options for a health probe: one try, and no longer than ``seconds`` waiting.

    The SDK's defaults retry with back-off and wait a minute for a read: with storage down a
    health check would take minutes (seen: 423 s), longer than Azure's front end waits (230 s).
    """
    return {"transport": RequestsTransport(connection_timeout=seconds, read_timeout=seconds),
            "retry_total": 0}


def table_service(settings: Settings, **kwargs: Any) -> TableServiceClient:
    kwargs.setdefault("transport", pooled_transport())
    conn = settings.effective_storage_connection
    if conn:
        return TableServiceClient.from_connection_string(conn, **kwargs)
    return TableServiceClient(
        endpoint=_endpoint(settings, "table", settings.table_service_uri),
        credential=_credential(settings), **kwargs,
    )


def queue_service(settings: Settings, **kwargs: Any) -> QueueServiceClient:
    kwargs.setdefault("transport", pooled_transport())
    conn = settings.effective_storage_connection
    if conn:
        return QueueServiceClient.from_connection_string(conn, **kwargs)
    return QueueServiceClient(
        account_url=_endpoint(settings, "queue", settings.queue_service_uri),
        credential=_credential(settings), **kwargs,
    )
