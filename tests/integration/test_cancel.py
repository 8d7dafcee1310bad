"""Cancel, over real HTTP through the local host, against Azurite, on the engine's test
workflow (hold, take, send on alpha, beta, gamma): an order still running is stopped, its work
undone (a step in flight learned first), each once; what is past cancelling is refused, saying
why; a bulk cancel dry-runs first."""

from __future__ import annotations

import json
from typing import Any

from shared.handlers.principal import CANCEL_ROLE, READ_ROLE, RESUBMIT_ROLE
from tests.integration.conftest import RunningHost
from tests.integration.helpers import drain_json, pending
from tests.integration.test_operator_api import OPERATOR_OID, accept, api, requests_of
from tests.integration.test_scheduler import reply
from tests.workflow import REGISTRY as TEST_FLOW

API = {"get_order", "cancel_order", "cancel_orders"}


def test_a_running_order_is_cancelled_and_its_work_undone_each_once(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    s = h.container.scheduler
    s.handle_command(accept("c-1"))
    (hold,) = requests_of(h, 0)
    s.handle_reply(reply(hold))
    (take,) = requests_of(h, 1)  # in flight when the operator cancels
    with api(h, READ_ROLE, CANCEL_ROLE) as c:
        r = c.post("/orders/c-1/cancel", json={"reason": "customer withdrew"})
        assert r.status_code == 202, r.text
        body = r.json()
    assert (body["ProcessState"], body["Compensation"]) == ("Cancelled", "Pending")
    by = f"Ada Operator (oid {OPERATOR_OID})"
    assert body["LastError"] == f"cancelled by {by}: customer withdrew"
    with api(h, READ_ROLE) as c:
        timeline = c.get("/orders/c-1").json()["Timeline"]
    assert {"event": "note", "detail": "customer withdrew", "by": by}.items() <= next(
        e for e in timeline if e["event"] == "note").items()
    assert any(e["event"] == "cancelled" for e in timeline)
    # The step's late answer moves nothing: no next step is asked for.
    s.handle_reply(reply(take))
    assert requests_of(h, 2) == []
    (cmd,) = drain_json(h.env["SchedulerQueueName"])
    assert (cmd["kind"], cmd["order_id"]) == ("compensate", "c-1")
    s.handle_command(json.dumps(cmd))
    # The step in flight is in doubt: asked again under its key, then undone by its answer.
    (learn,) = requests_of(h, 1)
    assert (learn["action"], learn["idempotency_key"]) == ("do", take["idempotency_key"])
    s.handle_reply(reply(learn))
    (undo_take,) = requests_of(h, 1)
    assert (undo_take["action"], undo_take["compensates"]) == ("undo", take["idempotency_key"])
    s.handle_reply(reply(undo_take))
    (undo_hold,) = requests_of(h, 0)
    assert undo_hold["compensates"] == hold["idempotency_key"]
    s.handle_reply(reply(undo_hold))
    state = h.container.store.get_state("c-1")
    assert state is not None and state.is_settled
    assert (state.process_state.value, state.compensation.value) == ("Cancelled", "Done")
    assert [requests_of(h, i) for i in range(3)] == [[], [], []]


def test_what_is_past_cancelling_is_refused_saying_why(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    s = h.container.scheduler
    s.handle_command(accept("done-1"))
    for step in range(3):
        (req,) = requests_of(h, step)
        s.handle_reply(reply(req))
    pending("p-1")
    with api(h, READ_ROLE, CANCEL_ROLE) as c:
        r = c.post("/orders/done-1/cancel", json={"reason": "too late"})
        assert r.status_code == 409 and "Processed" in r.json()["error"], r.text
        assert c.post("/orders/p-1/cancel", json={}).status_code == 400
        assert c.post("/orders/p-1/cancel", json={"reason": "x"}).status_code == 202
        again = c.post("/orders/p-1/cancel", json={"reason": "x"})
        assert again.status_code == 409 and "already" in again.json()["error"]
        assert c.post("/orders/nope/cancel", json={"reason": "x"}).status_code == 404
    with api(h, READ_ROLE, RESUBMIT_ROLE) as c:  # resubmitting is not cancelling
        r = c.post("/orders/p-1/cancel", json={"reason": "x"})
        assert r.status_code == 403 and "Orders.Cancel" in r.json()["error"]


def test_a_bulk_cancel_dry_runs_first_then_cancels_what_it_picked(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    for oid in ("b-1", "b-2", "other-1"):
        pending(oid)
    with api(h, READ_ROLE, CANCEL_ROLE) as c:
        ask = {"state": "Pending", "prefix": "b-", "reason": "supplier recall"}
        r = c.post("/cancellations", json=ask)
        assert r.status_code == 200, r.text
        assert sorted((i["OrderID"], i["Outcome"]) for i in r.json()["Items"]) == [
            ("b-1", "would cancel"), ("b-2", "would cancel")]
        assert h.container.store.get_state("b-1").process_state.value == "Pending"
        r = c.post("/cancellations", json={**ask, "dry_run": False})
        assert r.status_code == 202
        assert {i["Outcome"] for i in r.json()["Items"]} == {"cancelled"}
    states = {o: h.container.store.get_state(o).process_state.value
              for o in ("b-1", "b-2", "other-1")}
    assert states == {"b-1": "Cancelled", "b-2": "Cancelled", "other-1": "Pending"}


def test_the_cli_cancels_straight_to_storage_and_says_why_it_would_not(
        app_env: Any, capsys: Any) -> None:
    from orderctl.main import run

    app_env()
    settings = ["--settings", "/nonexistent/local.settings.json"]
    pending("p-2")
    assert run([*settings, "cancel", "p-2"]) == 2
    assert "--reason is required" in capsys.readouterr().err
    assert run([*settings, "cancel", "p-2", "--reason", "duplicate order"]) == 0
    assert "p-2 cancelled" in capsys.readouterr().out
    assert run([*settings, "cancel", "p-2", "--reason", "again"]) == 1
    assert "already" in capsys.readouterr().err
    pending("p-3")
    assert run([*settings, "cancel", "--state", "Pending", "--reason", "r", "--dry-run",
                "--json"]) == 0
    items = json.loads(capsys.readouterr().out)["Items"]
    assert [(i["OrderID"], i["Outcome"]) for i in items] == [("p-3", "would cancel")]
