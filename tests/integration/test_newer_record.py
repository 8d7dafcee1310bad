"""A record the next release wrote, in a shape this release cannot read, met mid-rollout: the
operator API says whose it is (409), a listing goes on without it, and the Supervisor leaves it
without an alert. Against Azurite, through the local host."""

from __future__ import annotations

from typing import Any

import httpx

from shared.domain.state import SCHEMA_VERSION
from shared.handlers.principal import READ_ROLE, RESUBMIT_ROLE
from tests.integration.conftest import RunningHost
from tests.integration.helpers import entities
from tests.integration.test_operator_api import accept, signed_in

ROUTES = {"get_order", "list_orders", "resubmit_order"}


def test_a_newer_releases_record_is_its_own_not_a_broken_one(run_host: Any) -> None:
    h: RunningHost = run_host(only=ROUTES)
    accept("n-1")
    accept("n-2")
    table = h.container.tables.get_table_client(h.env["StateTableName"])
    newer = table.get_entity("n-1", "state")
    newer["SchemaVersion"], newer["ProcessState"] = SCHEMA_VERSION + 1, "Held"
    table.update_entity(newer)
    both = signed_in(READ_ROLE, RESUBMIT_ROLE)
    with httpx.Client(base_url=f"http://127.0.0.1:{h.port}/api", timeout=10,
                      headers=both) as c:
        for r in (c.get("/orders/n-1"), c.post("/orders/n-1/resubmit", json={})):
            assert r.status_code == 409, r.text
            assert "newer release" in r.json()["error"]
        listed = c.get("/orders").json()
        ids = [o["OrderID"] for o in listed["orders"]]
        assert "n-2" in ids and "n-1" not in ids
    report = h.container.supervisor.tick()
    assert report.unreadable == 0
    assert entities(h.env["OperatorAlertsTableName"]) == []
    assert table.get_entity("n-1", "state")["ProcessState"] == "Held"  # left as it was
