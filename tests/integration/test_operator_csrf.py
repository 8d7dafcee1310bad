"""A change asked for by another site's page in an operator's browser (which carries the
platform's session cookie) is refused: a form or plain-text body, or a request the browser
says is cross-site. The console and the CLI send JSON. Against Azurite, the local host."""

from __future__ import annotations

from typing import Any

import httpx

from shared.handlers.principal import READ_ROLE, RESUBMIT_ROLE
from tests.integration.conftest import RunningHost
from tests.integration.test_operator_api import failed_and_compensated, signed_in

ROUTES = {"get_order", "resubmit_order", "resubmit_orders", "ack_alert", "list_alerts"}


def test_a_forged_cross_site_change_is_refused_and_changes_nothing(run_host: Any) -> None:
    h: RunningHost = run_host(only=ROUTES)
    failed_and_compensated(h, "x-1")
    both = signed_in(READ_ROLE, RESUBMIT_ROLE)
    forged = '{"dry_run": false, "force": true, "reason": "="}'
    with httpx.Client(base_url=f"http://127.0.0.1:{h.port}/api", timeout=10,
                      headers=both) as c:
        as_form = {"Content-Type": "text/plain"}
        for path in ("/orders/x-1/resubmit", "/resubmissions"):
            r = c.post(path, content=forged, headers=as_form)
            assert r.status_code == 415 and "JSON" in r.json()["error"], (path, r.text)
        (alert,) = c.get("/alerts").json()["alerts"]
        r = c.post(f"/alerts/{alert['AlertId']}/ack", content="",
                   headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 415
        r = c.post("/orders/x-1/resubmit", json={},
                   headers={"Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403 and "another site" in r.json()["error"]
        # A POST with no body at all, as a form with nothing in it or a fetch without a body
        # sends it: JSON is still asked for.
        for path in ("/orders/x-1/resubmit", "/resubmissions", f"/alerts/{alert['AlertId']}/ack"):
            r = c.post(path)
            assert r.status_code == 415 and "not none" in r.json()["error"], (path, r.text)
        # A browser names the page's origin on every POST: another site's, or none ("null",
        # a sandboxed frame), is refused whatever the other headers say.
        for origin in ("https://evil.example", "null", f"http://127.0.0.1:{h.port + 1}"):
            r = c.post("/orders/x-1/resubmit", json={}, headers={"Origin": origin})
            assert r.status_code == 403 and "another site" in r.json()["error"], origin
        assert c.get("/orders/x-1").json()["ProcessState"] == "Error"  # nothing changed
        # The console's own request (same origin, JSON) goes through.
        r = c.post("/orders/x-1/resubmit", json={"reason": "fixed"},
                   headers={"Sec-Fetch-Site": "same-origin",
                            "Origin": f"http://127.0.0.1:{h.port}"})
        assert r.status_code == 202, r.text
