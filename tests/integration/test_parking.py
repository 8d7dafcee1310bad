"""A parked order over real HTTP through the local host, against Azurite, on the engine's test
workflow: its step needed a person, the overview lists it with what is needed, and an operator
resumes it from that step under the same key (API and CLI); an order not parked is refused,
saying why."""

from __future__ import annotations

import json
from typing import Any

from azure.data.tables import UpdateMode

from shared.handlers.principal import CANCEL_ROLE, READ_ROLE, RESUBMIT_ROLE
from tests.integration.conftest import RunningHost
from tests.integration.helpers import drain_json, pending
from tests.integration.test_operator_api import accept, api, requests_of
from tests.integration.test_scheduler import reply
from tests.workflow import REGISTRY as TEST_FLOW

API = {"get_order", "resume_order", "overview"}
NEEDS = "the customer must confirm the payment"


def _parked(h: RunningHost, order_id: str) -> dict[str, Any]:
    """The order's second step answered as needing a person; its request returned."""
    s = h.container.scheduler
    s.handle_command(accept(order_id))
    (hold,) = requests_of(h, 0)
    s.handle_reply(reply(hold))
    (take,) = requests_of(h, 1)
    needs = json.loads(reply(take, "permanent_error", "take: HTTP 402 please confirm"))
    s.handle_reply(json.dumps({**needs, "needs": NEEDS}))
    return take


def test_a_parked_order_is_listed_and_resumed_from_its_step_under_its_key(
        run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    take = _parked(h, "p-1")
    with api(h, READ_ROLE) as c:
        (parked,) = c.get("/overview").json()["Parked"]
        assert (parked["OrderID"], parked["FailedStep"]) == ("p-1", "take")
        assert parked["LastError"] == f"take needs a person: {NEEDS}"
        assert c.get("/orders/p-1").json()["ProcessState"] == "Parked"
    with api(h, READ_ROLE, RESUBMIT_ROLE) as c:
        r = c.post("/orders/p-1/resume", json={"reason": "customer confirmed"})
        assert r.status_code == 202 and r.json()["ProcessState"] == "Pending", r.text
        again = c.post("/orders/p-1/resume", json={})
        assert again.status_code == 409 and "not Parked" in again.json()["error"]
        assert c.post("/orders/nope/resume", json={}).status_code == 404
    (cmd,) = drain_json(h.env["SchedulerQueueName"])
    h.container.scheduler.handle_command(json.dumps(cmd))
    (asked,) = requests_of(h, 1)
    assert (asked["idempotency_key"], asked["attempt"]) == (take["idempotency_key"], 2)


def test_parked_orders_are_cancelled_in_bulk_when_asked_for_by_state(run_host: Any) -> None:
    """Customers who never acted: their parked orders picked by state, a dry run first."""
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API | {"cancel_orders"})
    _parked(h, "p-5")
    pending("p-6")
    with api(h, READ_ROLE, CANCEL_ROLE) as c:
        ask = {"reason": "never confirmed", "dry_run": True}
        r = c.post("/cancellations", json={**ask, "state": "Parked"})
        assert r.status_code == 200, r.text
        assert [(i["OrderID"], i["Outcome"]) for i in r.json()["Items"]] == [
            ("p-5", "would cancel")]
        r = c.post("/cancellations", json=ask)  # by default, only what runs
        assert [i["OrderID"] for i in r.json()["Items"]] == ["p-6"]
        r = c.post("/cancellations", json={**ask, "state": "Parked", "dry_run": False})
        assert r.status_code == 202 and r.json()["Items"][0]["Outcome"] == "cancelled"
    state = h.container.store.get_state("p-5")
    assert state is not None and state.process_state.value == "Cancelled"


def test_the_cli_resumes_a_parked_order_and_says_why_it_would_not(
        run_host: Any, capsys: Any) -> None:
    from datetime import UTC, datetime

    from orderctl.main import run
    from shared.domain.state import ProcessState
    from shared.workflows import REGISTRY
    from tests.fakes import accepted

    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    # The CLI runs the app's own workflows: an order of one of them, parked at its first step.
    store = h.container.store
    state = accepted(store, "p-2", datetime.now(UTC), REGISTRY.get())
    state.process_state, state.steps[0].in_doubt = ProcessState.PARKED, True
    store.save(state)
    settings = ["--settings", "/nonexistent/local.settings.json"]
    assert run([*settings, "resume", "p-2", "--reason", "customer confirmed"]) == 0
    assert "p-2 resumed" in capsys.readouterr().out
    assert run([*settings, "resume", "p-2"]) == 1
    assert "not Parked" in capsys.readouterr().err
    pending("p-3")
    assert run([*settings, "resume"]) == 2
    assert "say what to resume" in capsys.readouterr().err


def test_a_parked_order_a_newer_release_wrote_is_left_to_it(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    _parked(h, "p-4")
    table = h.container.tables.get_table_client(h.env["StateTableName"])
    record = table.get_entity("p-4", "state")
    table.update_entity({"PartitionKey": "p-4", "RowKey": "state", "SchemaVersion": 99},
                        mode=UpdateMode.MERGE)
    with api(h, READ_ROLE, RESUBMIT_ROLE) as c:
        r = c.post("/orders/p-4/resume", json={})
        assert r.status_code == 409 and "newer release" in r.json()["error"], r.text
    after = table.get_entity("p-4", "state")
    assert (after["ProcessState"], after["SchemaVersion"]) == (record["ProcessState"], 99)
