"""The remote-service contract, answer by answer: what counts as done, refused or worth a retry.

Through httpx's MockTransport, so each answer is exactly the one a real (or broken) service or
proxy would give.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from shared.adapters.remote_service import (
    PermanentServiceError,
    RemoteServiceClient,
    TransientServiceError,
    parse_retry_after,
)
from tests.fakes import a_call


def client(response: httpx.Response, seen: list[httpx.Request] | None = None
           ) -> RemoteServiceClient:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return response

    return RemoteServiceClient("http://svc/api/pay",
                               httpx.Client(transport=httpx.MockTransport(handler)))


def call(c: RemoteServiceClient) -> dict[str, Any]:
    return c.call(a_call(), timeout=5)


def test_a_2xx_json_object_is_the_result_and_the_key_is_sent() -> None:
    seen: list[httpx.Request] = []
    assert call(client(httpx.Response(200, json={"status": "applied"}), seen)) == {
        "status": "applied"}
    (req,) = seen
    assert (req.method, str(req.url)) == ("POST", "http://svc/api/pay/take")
    assert req.headers["Idempotency-Key"] == "o-1.take.do"


def test_the_function_key_is_sent_when_one_is_set() -> None:
    seen: list[httpx.Request] = []
    keyed = RemoteServiceClient("http://svc/api/pay", httpx.Client(transport=httpx.MockTransport(
        lambda r: seen.append(r) or httpx.Response(200, json={}))), key="k-1")
    call(keyed)
    call(client(httpx.Response(200, json={}), seen))
    assert [r.headers.get("x-functions-key") for r in seen] == ["k-1", None]


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_permanent_and_never_success(status: int) -> None:
    """Bug 3: an http:// URL redirected to https marked every order charged."""
    r = httpx.Response(status, headers={"Location": "https://svc/api/pay/take"})
    with pytest.raises(PermanentServiceError, match="redirect to https://svc"):
        call(client(r))


@pytest.mark.parametrize("response", [
    httpx.Response(200, text="<html>proxy says hello</html>",
                   headers={"Content-Type": "text/html"}),
    httpx.Response(200, json=["not", "an", "object"]),
    httpx.Response(200, json="applied"),
    httpx.Response(204),
], ids=["html", "list", "string", "no-content"])
def test_a_2xx_without_a_json_object_is_not_success(response: httpx.Response) -> None:
    # The work may have happened: ask again under the same key (transient), never "done".
    with pytest.raises(TransientServiceError, match="without a JSON object"):
        call(client(response))


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
def test_busy_or_broken_is_transient(status: int) -> None:
    with pytest.raises(TransientServiceError):
        call(client(httpx.Response(status, text="busy")))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_other_4xx_is_a_refusal(status: int) -> None:
    with pytest.raises(PermanentServiceError, match=f"HTTP {status}"):
        call(client(httpx.Response(status, json={"error": "no"})))


def test_retry_after_is_read_from_a_busy_answer() -> None:
    r = httpx.Response(429, headers={"Retry-After": "7"})
    with pytest.raises(TransientServiceError) as e:
        call(client(r))
    assert e.value.retry_after == 7


def test_retry_after_as_an_http_date_or_garbage() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    later = now + timedelta(seconds=30)
    assert parse_retry_after(later.strftime("%a, %d %b %Y %H:%M:%S GMT"), now) == 30
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None
    assert parse_retry_after("99999999", now) == 3600
    # Digits to str.isdigit() that float() refuses: unusable, not a crash (red team R2)
    assert parse_retry_after("\u00b2", now) is None
    assert parse_retry_after("\u0663", now) is None  # an Arabic-Indic three


def test_a_2xx_answer_nested_past_the_parser_is_in_doubt_not_a_crash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.11's JSON parser raises RecursionError on a body nested a few thousand deep
    (3.13's parses it); whichever parser it meets, that is no JSON object, not a crash."""
    def too_deep(self: httpx.Response, **_: object) -> object:
        raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")

    monkeypatch.setattr(httpx.Response, "json", too_deep)
    with pytest.raises(TransientServiceError, match="without a JSON object"):
        client(httpx.Response(200, text='{"detail": [[[]]]}')).call(
            a_call(key="k-1"), timeout=5)


def test_no_answer_is_transient() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    c = RemoteServiceClient("http://svc", httpx.Client(transport=httpx.MockTransport(handler)))
    with pytest.raises(TransientServiceError, match="ConnectError"):
        call(c)


def test_a_burst_of_calls_keeps_its_connections_for_the_next() -> None:
    """Forty calls at once, twice, over real sockets: the second forty reuse the first forty's
    connections. A client that keeps fewer than it opens reconnects (TCP, TLS) for each."""
    import json
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from shared.adapters.remote_service import http_client

    calls = 40
    together = threading.Barrier(calls, timeout=10)
    connections = 0
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            nonlocal connections
            super().setup()
            with lock:
                connections += 1

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            together.wait()  # every call of the round is open at once
            body = json.dumps({"status": "applied"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        # Forty connects at once: with socketserver's listen backlog of 5, a loaded machine
        # drops SYNs, and a connect retried after seconds kept the round's barrier (and the
        # calls already in) waiting past their read timeout.
        request_queue_size = 2 * calls
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    remote = RemoteServiceClient(f"http://127.0.0.1:{server.server_address[1]}/api/pay",
                                 http_client())

    def slow_call(_: int) -> dict[str, Any]:  # longer than the barrier may hold a call
        return remote.call(a_call(), timeout=30)

    try:
        with ThreadPoolExecutor(calls) as pool:
            for _ in range(2):
                assert list(pool.map(slow_call, range(calls))) == \
                    [{"status": "applied"}] * calls
    finally:
        server.shutdown()
        server.server_close()
    assert connections == calls
