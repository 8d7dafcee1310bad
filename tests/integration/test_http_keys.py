"""HTTP routes check keys by auth level, as the Functions host does; on an app of the engine's
test workflow (tests/workflow.py), whose simulated service "alpha" stands for any."""

from __future__ import annotations

import socket
from typing import Any

import azure.functions as func
import httpx
import pytest

from localrun.azurite import free_port
from localrun.host.host import LocalFunctionHost
from localrun.host.http import HostKeys
from tests.integration.conftest import RunningHost
from tests.workflow import REGISTRY as TEST_FLOW

# A function-level route with a body: the simulated services' (any service's, any operation's).
SIMULATED = "sim/alpha/hold"


@pytest.fixture
def h(run_host: Any) -> RunningHost:
    return run_host(workflows=TEST_FLOW,
                    only={"get_order", "resubmit_order", "health", "simulated_service"},
                    LOCALRUN_FUNCTION_KEY="fn-key", LOCALRUN_MASTER_KEY="master-key")


def _call(h: RunningHost, method: str, path: str, key: str | None = None,
          how: str = "header") -> httpx.Response:
    headers = {"x-functions-key": key} if key and how == "header" else {}
    params = {"code": key} if key and how == "query" else {}
    return httpx.request(method, f"http://127.0.0.1:{h.port}/api/{path}", headers=headers,
                         params=params, json={} if method == "POST" else None, timeout=10)


def test_a_function_route_needs_a_key(h: RunningHost) -> None:
    assert h.host.keys == HostKeys("fn-key", "master-key")
    refused = _call(h, "GET", "health")
    assert (refused.status_code, refused.content) == (401, b"")
    assert _call(h, "GET", "health", "wrong").status_code == 401
    assert _call(h, "GET", "health", "fn-key").status_code == 200
    assert _call(h, "GET", "health", "fn-key", how="query").status_code == 200
    assert _call(h, "GET", "health", "master-key").status_code == 200


def test_no_key_opens_an_operator_route(h: RunningHost) -> None:
    """Issue 32: resubmit was admin-level (the master key). Operator routes now pass the host's
    key check (anonymous) and the app refuses any caller without an operator identity: the
    app's JSON answer, not the host's empty 401."""
    for key in (None, "fn-key", "master-key"):
        for method, path in [("POST", "orders/nope/resubmit"), ("GET", "orders/nope")]:
            r = _call(h, method, path, key)
            assert r.status_code == 401 and "sign in" in r.json()["error"], (key, path)


def test_the_simulated_services_need_a_function_key(h: RunningHost) -> None:
    assert _call(h, "POST", SIMULATED).status_code == 401
    # With the key the service itself answers (it wants the request's idempotency key).
    assert _call(h, "POST", SIMULATED, "fn-key").status_code == 400


def test_an_anonymous_route_needs_no_key(app_env: Any) -> None:
    app = func.FunctionApp()

    @app.function_name("open")
    @app.route(route="open", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def open_(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse("hello")

    env = app_env()
    with LocalFunctionHost(app, settings=env, storage_connection=env["AzureWebJobsStorage"],
                           host_json={"version": "2.0"}, http_port=free_port()) as host:
        r = httpx.get(f"http://127.0.0.1:{host.http_port}/api/open", timeout=10)
    assert (r.status_code, r.text) == (200, "hello")


def test_keys_are_made_up_when_the_settings_do_not_give_them() -> None:
    a, b = HostKeys.from_settings({}), HostKeys.from_settings({})
    assert a.function != b.function and len(a.master) >= 32
    assert not a.allow("FUNCTION", None) and a.allow("FUNCTION", a.function)
    assert not a.allow("ADMIN", a.function) and a.allow("ADMIN", a.master)
    assert a.allow("ANONYMOUS", None)


def _raw(h: RunningHost, head: str, body: bytes = b"") -> tuple[int, dict[str, str]]:
    """One request as bytes on its own connection (a header value that httpx would not send,
    a body that never comes), and the status and headers of the answer."""
    with socket.create_connection(("127.0.0.1", h.port), timeout=10) as s:
        s.sendall(head.encode("utf-8") + b"\r\n\r\n" + body)
        answer = s.makefile("rb").read(65536).split(b"\r\n\r\n", 1)[0].decode("latin-1")
    if not answer:
        return 0, {}  # the connection closed with no answer
    status, *lines = answer.split("\r\n")
    return int(status.split()[1]), dict(line.split(": ", 1) for line in lines)


@pytest.mark.parametrize("how", ["header", "query"])
def test_a_malformed_key_is_a_wrong_key(h: RunningHost, how: str) -> None:
    """Issue 32: a key with a non-ASCII character crashed the request (hmac refuses such a
    str) and the caller got no answer; the host answers 401, and goes on serving."""
    for key in ("clé", "fn-key\u00e9", "\u2603" * 40):
        if how == "header":
            status, _ = _raw(h, f"GET /api/health HTTP/1.1\r\nHost: x\r\n"
                                f"x-functions-key: {key}\r\nConnection: close")
        else:
            status = _call(h, "GET", "health", key, how="query").status_code
        assert status == 401, key
    assert _call(h, "GET", "health", "fn-key").status_code == 200


def test_the_key_is_checked_before_the_body_is_read(h: RunningHost) -> None:
    """Issue 32: the host read a request's whole body before looking at its key, so anyone
    could make it wait for (and hold) a body as long as they liked. A caller without the key
    is answered from the headers alone: here the body it announces never comes, and the
    answer does not wait for it (the connection is then closed: its body is still unread)."""
    head = f"POST /api/{SIMULATED} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000"
    status, headers = _raw(h, head, b"{")
    assert (status, headers.get("Connection")) == (401, "close")
    status, _ = _raw(h, head + "\r\nx-functions-key: wrong", b"{")
    assert status == 401
    # With the key the body is read: a length that is no number is refused, not a crash.
    status, _ = _raw(h, f"POST /api/{SIMULATED} HTTP/1.1\r\nHost: x\r\n"
                        "x-functions-key: fn-key\r\nContent-Length: 1x\r\nConnection: close")
    assert status == 400


def test_a_stopped_host_closes_its_kept_alive_connections(app_env: Any) -> None:
    """A client's pooled connection to a host that stopped reaches the next host on its port
    (as when a process exits), not the stopped one answering 503 "stopping" to each request."""
    app = func.FunctionApp()

    @app.function_name("who")
    @app.route(route="who/any", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def who(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse("any")

    env, port = app_env(), free_port()

    def host() -> LocalFunctionHost:
        return LocalFunctionHost(app, settings=env, storage_connection=env["AzureWebJobsStorage"],
                                 host_json={"version": "2.0"}, http_port=port)

    with httpx.Client(timeout=10) as client:
        with host():
            assert client.get(f"http://127.0.0.1:{port}/api/who/any").status_code == 200
        with host():
            r = client.get(f"http://127.0.0.1:{port}/api/who/any")
    assert (r.status_code, r.text) == (200, "any")


def test_the_host_passes_on_where_a_local_proxy_says_a_request_came_from(
        h: RunningHost) -> None:
    """A proxy on this machine (nginx rewrites Host to its upstream's, ngrok can) connects from
    127.0.0.1: the host adds that address to the proxy's X-Forwarded-For, never in its place,
    so a request from elsewhere is not taken for this machine's."""
    for forwarded in ("203.0.113.5", "127.0.0.1, 198.51.100.7"):
        r = httpx.get(f"http://127.0.0.1:{h.port}/api/orders/nope",
                      headers={"X-Forwarded-For": forwarded}, timeout=10)
        assert r.status_code == 401 and "another machine" in r.json()["error"], forwarded
    r = httpx.get(f"http://127.0.0.1:{h.port}/api/orders/nope",
                  headers={"X-Forwarded-For": "127.0.0.1"}, timeout=10)
    assert r.status_code == 401 and "sign in" in r.json()["error"]  # local: no identity given
