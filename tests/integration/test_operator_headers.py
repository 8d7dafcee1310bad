"""Every JSON answer of the app's HTTP routes carries Cache-Control: no-store and
X-Content-Type-Options: nosniff (issue 32, item 5), the successes and the refusals alike."""

from __future__ import annotations

from typing import Any

import httpx

from shared.handlers.principal import READ_ROLE, RESUBMIT_ROLE
from tests.integration.conftest import RunningHost
from tests.integration.test_operator_api import accept, failed_and_compensated, signed_in

EVERY_ROUTE = {"get_order", "list_orders", "resubmit_order", "list_rejected", "overview",
               "health", "openapi", "console", "health_details", "list_alerts", "ack_alert",
               "resubmit_orders"}

# (method, path, body, who, status): who is "both" (both roles), "reader", "none" (no
# principal) or "key" (the function key, no principal).
CALLS: list[tuple[str, str, Any, str, int]] = [
    ("GET", "/orders/f-1", None, "both", 200),
    ("GET", "/orders/nope", None, "both", 404),
    ("GET", "/orders/a%2Fb", None, "both", 400),
    ("GET", "/orders/f-1", None, "none", 401),
    ("GET", "/orders", None, "both", 200),
    ("GET", "/orders?state=Lost", None, "both", 400),
    ("GET", "/orders?limit=0", None, "reader", 400),
    ("POST", "/orders/f-1/resubmit", {"reason": "x"}, "reader", 403),
    ("POST", "/orders/f-1/resubmit", {"reasn": "x"}, "both", 400),
    ("POST", "/orders/nope/resubmit", {}, "both", 404),
    ("POST", "/orders/o-1/resubmit", {}, "both", 409),
    ("POST", "/orders/f-1/resubmit", {"reason": "x"}, "both", 202),
    ("GET", "/rejected", None, "reader", 200),
    ("GET", "/rejected?continuation=zzz", None, "reader", 400),
    ("GET", "/overview", None, "reader", 200),
    ("GET", "/overview", None, "none", 401),
    ("POST", "/resubmissions", {}, "both", 200),
    ("POST", "/resubmissions", {"limit": 0}, "both", 400),
    ("POST", "/resubmissions", {}, "reader", 403),
    ("GET", "/alerts", None, "reader", 200),
    ("GET", "/alerts?acknowledged=maybe", None, "reader", 400),
    ("POST", "/alerts/nope/ack", {}, "both", 400),
    ("POST", "/alerts/20260101.0000000000001-000000000000/ack", {}, "both", 404),
    ("POST", "/alerts/20260101.0000000000001-000000000000/ack", None, "reader", 403),
    ("GET", "/health/details", None, "reader", 200),
    ("GET", "/health/details", None, "key", 401),
    ("GET", "/health", None, "key", 200),
    ("GET", "/openapi.json", None, "key", 200),
]


def _headers(h: RunningHost, who: str) -> dict[str, str]:
    if who == "both":
        return signed_in(READ_ROLE, RESUBMIT_ROLE)
    if who == "reader":
        return signed_in(READ_ROLE)
    if who == "key":
        return {"x-functions-key": "fn-key"}
    return {}


def check_headers(r: httpx.Response) -> None:
    assert r.headers["content-type"].startswith("application/json"), (r.request.url, r.text)
    assert r.headers["cache-control"] == "no-store", r.request.url
    assert r.headers["x-content-type-options"] == "nosniff", r.request.url
    assert r.headers["strict-transport-security"].startswith("max-age="), r.request.url


def test_every_json_answer_is_not_stored_and_not_sniffed(run_host: Any) -> None:
    h: RunningHost = run_host(only=EVERY_ROUTE, LOCALRUN_FUNCTION_KEY="fn-key",
                              LOCALRUN_MASTER_KEY="master-key")
    failed_and_compensated(h, "f-1")
    accept("o-1")
    with httpx.Client(base_url=f"http://127.0.0.1:{h.port}/api", timeout=10) as c:
        for method, path, body, who, status in CALLS:
            r = c.request(method, path, json=body, headers=_headers(h, who))
            assert r.status_code == status, (method, path, r.status_code, r.text)
            check_headers(r)
