"""HTTP client for one remote service, sorting its failures into transient and permanent."""

from __future__ import annotations

from typing import Any

import httpx

IDEMPOTENCY_HEADER = "Idempotency-Key"
_TRANSIENT_STATUS = {408, 425, 429}


class TransientServiceError(Exception):
    """Worth retrying: the service was slow, busy or briefly broken."""


class PermanentServiceError(Exception):
    """Retrying will not help: the service refused the request."""


class RemoteServiceClient:
    def __init__(self, base_url: str, http: httpx.Client) -> None:
        self._base = base_url.rstrip("/")
        self._http = http

    def call(self, operation: str, idempotency_key: str, body: dict[str, Any],
             timeout: float) -> dict[str, Any]:
        try:
            r = self._http.post(
                f"{self._base}/{operation}", json=body, timeout=timeout,
                headers={IDEMPOTENCY_HEADER: idempotency_key},
            )
        except httpx.TransportError as e:  # timeouts, refused connections, resets
            raise TransientServiceError(f"{operation}: {type(e).__name__}: {e}") from e
        if r.status_code >= 500 or r.status_code in _TRANSIENT_STATUS:
            raise TransientServiceError(f"{operation}: HTTP {r.status_code} {r.text[:200]}")
        if r.status_code >= 400:
            raise PermanentServiceError(f"{operation}: HTTP {r.status_code} {r.text[:500]}")
        try:
            result = r.json()
        except ValueError:
            result = {}
        return result if isinstance(result, dict) else {"result": result}
