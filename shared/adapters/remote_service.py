"""HTTP client for one remote service. Every answer is classified as the contract says
(docs/contracts.md, The remote-service contract): done, transient (asked again under the same
Idempotency-Key) or permanent (refused).
"""

from __future__ import annotations

import email.utils
import re
from datetime import UTC, datetime
from typing import Any

import httpx

from shared import tracing
from shared.domain.services import Call

IDEMPOTENCY_HEADER = "Idempotency-Key"
FUNCTION_KEY_HEADER = "x-functions-key"
_TRANSIENT_STATUS = {408, 425, 429}
# Retry-After beyond this is treated as "not within any budget we have".
_MAX_RETRY_AFTER = 3600.0


class TransientServiceError(Exception):
    """Worth retrying: the service was slow, busy or briefly broken."""

    def __init__(self, message: str, retry_after: float | None = None, *,
                 busy: bool = False) -> None:
        super().__init__(message)
        # Seconds the service asked us to wait before the next attempt.
        self.retry_after = retry_after
        # It said it is overloaded (429, or a wait asked for): a limited service's every
        # instance waits (shared/domain/limits.py).
        self.busy = busy or retry_after is not None


class PermanentServiceError(Exception):
    """Retrying will not help: the service refused the request."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        # The HTTP status it answered with (a step may declare some worth asking again).
        self.status = status


class NeedsPersonError(PermanentServiceError):
    """The service did nothing, and cannot until a person acts: ``needs`` says what."""

    def __init__(self, message: str, needs: str) -> None:
        super().__init__(message)
        self.needs = needs


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None if unusable."""
    if not value:
        return None
    value = value.strip()
    if re.fullmatch(r"[0-9]+", value):  # not isdigit(): "²" is a digit to it, not to float()
        return min(float(value), _MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(0.0, seconds), _MAX_RETRY_AFTER)


# Calls to remote services one instance may have open at once (three Agents, each up to
# batchSize + newBatchThreshold = 24 messages in flight, share it).
CONNECTIONS = 64


def http_client() -> httpx.Client:
    """The instance's one HTTP client for remote services.

    Every connection it opens is kept for the next call. With fewer kept than it may open
    (httpx's default keeps 20), a burst closes the extra connections after each call and opens
    new ones for the next: in the bench's burst, 223 connections for 600 calls with 16 kept,
    against 31 with all kept. In Azure each new one is a TCP and a TLS handshake."""
    return httpx.Client(limits=httpx.Limits(max_connections=CONNECTIONS,
                                            max_keepalive_connections=CONNECTIONS))


class RemoteServiceClient:
    def __init__(self, base_url: str, http: httpx.Client, key: str | None = None) -> None:
        self._base = base_url.rstrip("/")
        self._http = http
        self._headers = {FUNCTION_KEY_HEADER: key} if key else {}

    def call(self, call: Call, timeout: float) -> dict[str, Any]:
        operation = call.operation
        body = call.http_body()
        headers = {**self._headers, IDEMPOTENCY_HEADER: call.key}
        traceparent = tracing.current_traceparent()
        if traceparent:  # so that the service can join the order's trace
            headers[tracing.TRACEPARENT] = traceparent
        try:  # redirects are not followed: a POST is never replayed elsewhere
            r = self._http.post(f"{self._base}/{operation}", json=body, timeout=timeout,
                                headers=headers, follow_redirects=False)
        except httpx.TransportError as e:  # timeouts, refused connections, resets
            raise TransientServiceError(f"{operation}: {type(e).__name__}: {e}") from e
        status = r.status_code
        if status >= 500 or status in _TRANSIENT_STATUS:
            raise TransientServiceError(f"{operation}: HTTP {status} {r.text[:200]}",
                                        parse_retry_after(r.headers.get("Retry-After")),
                                        busy=status == 429)
        if 300 <= status < 400:
            raise PermanentServiceError(
                f"{operation}: HTTP {status} redirect to {r.headers.get('Location', '?')}: "
                "the service URL must be the final address (https, exact path)")
        if status >= 400:
            raise PermanentServiceError(f"{operation}: HTTP {status} {r.text[:500]}", status)
        if not 200 <= status < 300:  # 1xx cannot reach here through httpx; be exhaustive
            raise TransientServiceError(f"{operation}: unexpected HTTP {status}")
        try:
            result = r.json()
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            result = None
        if not isinstance(result, dict):
            raise TransientServiceError(
                f"{operation}: HTTP {status} without a JSON object "
                f"({r.headers.get('Content-Type', 'no content type')}): {r.text[:200]!r}; "
                "the work may have happened, asking again under the same key")
        return result
