"""What an operator reads when something goes wrong says what, in words: never a Python class
name, a module path or a traceback (issue 33, item 4).

The orders CLI and the operator API are fed every failure they can meet: storage down, an
order or alert that does not exist, bad input, a conflict, a caller without the role, a caller
without an identity, a record this version cannot read, the API itself unreachable."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from azure.core.exceptions import HttpResponseError, ServiceRequestError

from localrun.azurite import free_port
from orderctl.main import run
from shared.handlers.principal import READ_ROLE, RESUBMIT_ROLE
from shared.settings import AZURITE_CONNECTION
from tests.integration.conftest import RunningHost
from tests.integration.test_operator_api import (
    accept,
    failed_and_compensated,
    signed_in,
)

# What gives Python away: a traceback or its frames, a module path, a class name (the SDK's,
# the app's or the language's), an object's repr, Python's own phrasing of a failed parse.
FORBIDDEN = re.compile(
    r"Traceback|File \"|\.py\b|\b[A-Z]\w*(Error|Exception)\b|object at 0x|<class "
    r"|\b(shared|azure|urllib3|httpx|httpcore|pydantic|typer|click|orderctl|builtins)\.[a-z_]"
    r"|CorruptRecord|OrderNotFound|ResubmitRefused|IllegalTransition|BadContinuation"
    r"|AlertNotFound|AckRefused|is not a valid \w+State|int\(\) with base|errors\.pydantic"
    r"|For further information visit")

API_ROUTES = {"get_order", "list_orders", "resubmit_order", "list_rejected", "overview",
              "list_alerts", "ack_alert", "resubmit_orders", "health_details"}
NO_ALERT = "20260101.0000000000001-000000000000"
# What the SDK raises when storage cannot be reached, as it words it.
STORAGE_DOWN = ServiceRequestError(
    "<urllib3.connection.HTTPConnection object at 0x7f3a>: Failed to establish a new "
    "connection: [Errno 111] Connection refused")


def clean(text: str, where: str) -> None:
    found = FORBIDDEN.search(text)
    assert found is None, f"{where}: {found.group(0)!r} in {text!r}"


def orders(*args: str) -> int:
    return run(["--settings", "/nonexistent/local.settings.json", *args])


def corrupt(h: RunningHost, order_id: str) -> None:
    table = h.container.tables.get_table_client(h.env["StateTableName"])
    bad = table.get_entity(order_id, "state")
    bad["ProcessState"] = "Exploded"
    table.update_entity(bad)


# -- the API ---------------------------------------------------------------------------------

READER, BOTH, RESUBMITTER = (signed_in(READ_ROLE), signed_in(READ_ROLE, RESUBMIT_ROLE),
                             signed_in(RESUBMIT_ROLE))
# (method, path, body, caller, status)
API_FAILURES: list[tuple[str, str, Any, dict[str, str], int]] = [
    # unauthenticated
    *((m, p, None, {}, 401) for m, p in [
        ("GET", "/orders/f-1"), ("GET", "/orders"), ("POST", "/orders/f-1/resubmit"),
        ("GET", "/overview"), ("GET", "/rejected"), ("GET", "/alerts"),
        ("POST", f"/alerts/{NO_ALERT}/ack"), ("POST", "/resubmissions"),
        ("GET", "/health/details")]),
    # forbidden
    ("POST", "/orders/f-1/resubmit", {}, READER, 403),
    ("POST", f"/alerts/{NO_ALERT}/ack", None, READER, 403),
    ("POST", "/resubmissions", {}, READER, 403),
    ("GET", "/orders/f-1", None, RESUBMITTER, 403),
    ("GET", "/health/details", None, RESUBMITTER, 403),
    # not found
    ("GET", "/orders/ghost", None, BOTH, 404),
    ("POST", "/orders/ghost/resubmit", {}, BOTH, 404),
    ("POST", f"/alerts/{NO_ALERT}/ack", {}, BOTH, 404),
    # bad input
    ("GET", "/orders/a%2Fb", None, BOTH, 400),
    ("GET", "/orders?state=Lost", None, BOTH, 400),
    ("GET", "/orders?limit=abc", None, BOTH, 400),
    ("GET", "/orders?limit=0", None, BOTH, 400),
    ("GET", "/orders?continuation=garbage", None, BOTH, 400),
    ("GET", "/orders?prefix=a%20b", None, BOTH, 400),
    ("GET", "/rejected?limit=1.5", None, BOTH, 400),
    ("GET", "/alerts?acknowledged=maybe", None, BOTH, 400),
    ("GET", "/alerts?limit=x", None, BOTH, 400),
    ("POST", "/orders/f-1/resubmit", "{not json", BOTH, 400),
    ("POST", "/orders/f-1/resubmit", {"reason": 5}, BOTH, 400),
    ("POST", "/orders/f-1/resubmit", {"force": "yes"}, BOTH, 400),
    ("POST", "/orders/f-1/resubmit", {"reason": "x" * 2000}, BOTH, 400),
    ("POST", "/alerts/nope/ack", {}, BOTH, 400),
    ("POST", f"/alerts/{NO_ALERT}/ack", {"note": 1}, BOTH, 400),
    ("POST", "/resubmissions", {"since": "yesterday"}, BOTH, 400),
    ("POST", "/resubmissions", {"since": "2026-11-25T08:00:00"}, BOTH, 400),
    ("POST", "/resubmissions", {"limit": "many"}, BOTH, 400),
    ("POST", "/resubmissions", {"state": "Pending"}, BOTH, 400),
    ("POST", "/resubmissions", [], BOTH, 400),
    # conflict
    ("POST", "/orders/o-1/resubmit", {}, BOTH, 409),
    # a record this version cannot read
    ("GET", "/orders/bad-1", None, BOTH, 500),
    ("POST", "/orders/bad-1/resubmit", {}, BOTH, 500),
]


def test_every_failure_of_the_api_is_said_in_words(run_host: Any) -> None:
    h: RunningHost = run_host(only=API_ROUTES)
    failed_and_compensated(h, "f-1")
    accept("o-1")
    accept("bad-1")
    corrupt(h, "bad-1")
    with httpx.Client(base_url=f"http://127.0.0.1:{h.port}/api", timeout=10) as c:
        for method, path, body, caller, status in API_FAILURES:
            content = body if isinstance(body, str) else None
            # A body of text is sent as JSON says it is: what is then wrong is the body.
            r = c.request(method, path, content=content,
                          headers={**caller, **({"Content-Type": "application/json"}
                                                if content is not None else {})},
                          json=None if content is not None else body)
            where = f"{method} {path} {body!r}"
            assert r.status_code == status, (where, r.status_code, r.text)
            message = r.json()["error"]
            assert message and "\n" not in message, where
            clean(message, where)
        # Acknowledged twice: the second is a conflict, said in words.
        (alert,) = c.get("/alerts", headers=BOTH).json()["alerts"]
        assert c.post(f"/alerts/{alert['AlertId']}/ack", json={}, headers=BOTH).status_code == 200
        again = c.post(f"/alerts/{alert['AlertId']}/ack", json={}, headers=BOTH)
        assert again.status_code == 409
        clean(again.json()["error"], "ack twice")


@pytest.mark.parametrize("failure", [
    STORAGE_DOWN,
    HttpResponseError(message="This request is not authorized to perform this operation.\n"
                              "RequestId:5f0c\nTime:2026-11-25T10:00:00Z\n"
                              "ErrorCode:AuthorizationFailure"),
], ids=["unreachable", "refused"])
def test_storage_failing_under_the_api_is_a_503_in_words(run_host: Any, failure: Exception,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Storage down mid-request: the host answered 500 with an empty body (the exception went
    to the log), and the console could only say "HTTP 500"."""
    h: RunningHost = run_host(only=API_ROUTES)
    failed_and_compensated(h, "f-1")

    def down(*_: object, **__: object) -> None:
        raise failure

    store = h.container.store
    for name in ("load", "get_state", "list_states", "order_ids_where"):
        monkeypatch.setattr(store, name, down)
    for name in ("recent", "of_order", "acknowledge"):
        monkeypatch.setattr(h.container.operator._alerts, name, down)
    with httpx.Client(base_url=f"http://127.0.0.1:{h.port}/api", timeout=10,
                      headers=BOTH) as c:
        for method, path in [("GET", "/orders/f-1"), ("GET", "/orders"),
                             ("GET", "/orders?customer=c-1"), ("GET", "/overview"),
                             ("GET", "/alerts"), ("POST", "/orders/f-1/resubmit"),
                             ("POST", "/resubmissions")]:
            r = c.request(method, path, json={} if method == "POST" else None)
            assert r.status_code == 503, (path, r.status_code, r.text)
            message = r.json()["error"]
            assert message.startswith("storage "), (path, message)
            clean(message, path)


# -- the CLI ---------------------------------------------------------------------------------

def _said(capsys: pytest.CaptureFixture[str], call: Callable[[], int], where: str,
          code: int | None = None) -> str:
    rc = call()
    captured = capsys.readouterr()
    assert rc != 0, (where, captured)
    if code is not None:
        assert rc == code, (where, rc, captured)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), (where, captured.err)
    clean(captured.out + captured.err, where)
    return lines[0]


def test_every_failure_of_the_cli_is_one_line_in_words(
        run_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # A host whose operator reads only (its own tables: the CLI reads the host's below).
    reader = run_host(only={"resubmit_order", "ack_alert", "resubmit_orders"},
                      OperatorDevelopmentRoles=READ_ROLE)
    h: RunningHost = run_host(only={"resubmit_order", "ack_alert", "resubmit_orders",
                                    "health_details"})  # signed out: no development principal
    failed_and_compensated(h, "f-1")
    accept("o-1")
    accept("bad-1")
    corrupt(h, "bad-1")
    (alert,) = h.container.operator.alerts(5).alerts
    api = f"http://127.0.0.1:{h.port}/api"
    as_reader = f"http://127.0.0.1:{reader.port}/api"
    nowhere = f"http://127.0.0.1:{free_port()}/api"
    for args in [
        # not found
        ["status", "ghost"], ["trace", "ghost"], ["resubmit", "ghost"],
        ["alerts", "ack", NO_ALERT],
        # bad input
        ["status", "a/b"], ["list", "--state", "Lost"], ["list", "--continuation", "garbage"],
        ["rejected", "--continuation", "garbage"], ["resubmit", "f-1", "--reason", "x" * 2000],
        ["resubmit", "--state", "Pending"], ["resubmit", "--state", "Error", "--since", "soon"],
        ["alerts", "ack", "nope"], ["alerts", "ack", alert.AlertId, "--note", "x" * 600],
        ["send"], ["send", "--connection-string", "garbage"], ["watch"],
        # conflict
        ["resubmit", "o-1"],
        # a record this version cannot read
        ["status", "bad-1"], ["trace", "bad-1"], ["resubmit", "bad-1"],
        # the API: signed out, without the role, refusing, unreachable
        ["--api", api, "resubmit", "f-1"], ["--api", api, "alerts", "ack", alert.AlertId],
        ["--api", api, "resubmit", "--state", "Error"], ["--api", api, "health"],
        ["--api", as_reader, "resubmit", "f-1"],
        ["--api", as_reader, "alerts", "ack", alert.AlertId],
        ["--api", as_reader, "resubmit", "--state", "Error", "--dry-run"],
        ["--api", nowhere, "resubmit", "f-1"], ["--api", nowhere, "health"],
        ["--api", "not a url", "resubmit", "f-1"],
    ]:
        _said(capsys, lambda args=args: orders(*args), " ".join(args)[:120])  # type: ignore[misc]
    # Acknowledged twice: the second is refused, naming the first.
    assert orders("alerts", "ack", alert.AlertId) == 0
    capsys.readouterr()
    assert "was acknowledged by" in _said(
        capsys, lambda: orders("alerts", "ack", alert.AlertId), "ack twice", 1)


@pytest.mark.parametrize("args", [
    ["status", "o-1"], ["trace", "o-1"], ["list"], ["list", "--state", "Error"],
    ["rejected"], ["alerts"], ["alerts", "ack", NO_ALERT], ["resubmit", "o-1"],
    ["resubmit", "--state", "Error", "--dry-run"], ["health"], ["watch", "o-1"],
    ["send", "--local"],
], ids=lambda a: "-".join(a)[:40])
def test_storage_down_under_the_cli_is_one_line_in_words(
        args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    down = AZURITE_CONNECTION.replace(":10001/", f":{free_port()}/").replace(
        ":10002/", f":{free_port()}/")
    # Health reports storage down as its answer (exit 1); every other command fails (exit 2).
    line = _said(capsys, lambda: orders("--storage", down, *args), " ".join(args),
                 1 if args == ["health"] else 2)
    assert "unreachable" in line


def test_an_unexpected_failure_is_one_line_too(
        env_for_cli: None, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure nobody foresaw (a bug): one line that says where to look, not a traceback."""
    import orderctl.connection as cli

    def broken(*_: object, **__: object) -> None:
        raise KeyError("Steps")

    monkeypatch.setattr(cli.bootstrap.Container, "close", lambda self: None)
    monkeypatch.setattr(cli._Options, "container", broken)
    line = _said(capsys, lambda: orders("status", "o-1"), "unexpected", 1)
    assert "ORDERS_DEBUG" in line


@pytest.fixture
def env_for_cli(app_env: Any) -> None:
    app_env()
