"""The operator HTTP API, over real HTTP through the local host, against Azurite; on an app of
the engine's test workflow (tests/workflow.py: hold, take, send on alpha, beta, gamma).

The helpers that drive an order (accept, failed_and_compensated, compensation_failed) drive
whatever workflow the host runs, by its steps' places: the CLI's and the console's tests drive
the shipped example with them."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from shared.domain import budget
from shared.domain.state import CompensationState, ProcessState
from shared.handlers.operator_requests import MAX_REASON
from shared.handlers.principal import READ_ROLE, RESUBMIT_ROLE
from tests.integration.conftest import RunningHost
from tests.integration.helpers import (
    drain_json,
    index_entries,
    pending,
)
from tests.integration.test_scheduler import reply
from tests.workflow import BY_CUSTOMER
from tests.workflow import REGISTRY as TEST_FLOW

API = {"get_order", "list_orders", "resubmit_order", "health"}


OPERATOR_OID = "5f0c1e2a-0000-4000-8000-0000000000aa"


def signed_in(*roles: str, name: str = "Ada Operator", oid: str = OPERATOR_OID) -> dict[str, str]:
    """The header App Service Authentication hands the app for a signed-in Entra ID user."""
    claims = [{"typ": "name", "val": name},
              {"typ": "http://schemas.microsoft.com/identity/claims/objectidentifier", "val": oid},
              *({"typ": "roles", "val": r} for r in roles)]
    doc = {"auth_typ": "aad", "claims": claims, "name_typ": "name", "role_typ": "roles"}
    return {"X-MS-CLIENT-PRINCIPAL": base64.b64encode(json.dumps(doc).encode()).decode()}


def api(h: RunningHost, *roles: str) -> httpx.Client:
    """An operator with both app roles (or the ones given), as the platform presents them: no
    key (test_http_keys and the tests below hold that keys open no operator route)."""
    return httpx.Client(base_url=f"http://127.0.0.1:{h.port}/api", timeout=10,
                        headers=signed_in(*(roles or (READ_ROLE, RESUBMIT_ROLE))))


def accept(order_id: str) -> str:
    """A Pending order, its start command taken off the queue and returned."""
    return pending(order_id)


def requests_of(h: RunningHost, step: int) -> list[dict[str, Any]]:
    """What the service of the host's workflow's ``step``-th step (from 0) has been sent: its
    requests queue, drained."""
    agent = h.container.workflow.steps[step].service
    return drain_json(h.container.config.services[agent].queue)


def failed_and_compensated(h: RunningHost, order_id: str) -> None:
    """Drive one order to Error, by hand: its first step done, its second refused (it did
    nothing, so it is not undone), the first undone."""
    s = h.container.scheduler
    s.handle_command(accept(order_id))
    (req,) = requests_of(h, 0)
    s.handle_reply(reply(req))
    (refused,) = requests_of(h, 1)
    s.handle_reply(reply(refused, "permanent_error", "HTTP 422 card declined"))
    assert requests_of(h, 1) == []  # no undo of the refused step
    (undo,) = requests_of(h, 0)
    assert (undo["action"], undo["compensates"]) == ("undo", req["idempotency_key"])
    s.handle_reply(reply(undo))


def test_get_order(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    accept("o-1")
    with api(h) as c:
        r = c.get("/orders/o-1")
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        body = r.json()
        assert (body["OrderID"], body["ProcessState"], body["FailureCount"]) == ("o-1", "Pending",
                                                                                  0)
        assert body["LockedBy"] is None and body["CompleteBy"] is None
        assert body["Order"]["customer_id"] == "c-1"
        assert [s["name"] for s in body["Steps"]] == ["hold", "take", "send"]
        r = c.get("/orders/nope")
        assert r.status_code == 404 and "nope" in r.json()["error"]
        # A record this code cannot read: a JSON error that says so, not a bare 500.
        table = h.container.tables.get_table_client(h.env["StateTableName"])
        bad = table.get_entity("o-1", "state")
        bad["ProcessState"] = "Exploded"
        table.update_entity(bad)
        r = c.get("/orders/o-1")
        assert r.status_code == 500 and "unreadable" in r.json()["error"]
        assert "Exploded" in r.json()["error"]


def test_an_order_shows_what_happened_to_it_after_its_compensation(run_host: Any) -> None:
    """The step history keeps its errors through the undo, and the timeline holds every
    attempt sent, its outcome, the failure and each undo, oldest first."""
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    failed_and_compensated(h, "t-1")
    with api(h) as c:
        body = c.get("/orders/t-1").json()
        assert c.get("/orders").json()["orders"][0]["Timeline"] is None  # one order's only
    steps = {s["name"]: s for s in body["Steps"]}
    # The refused step did nothing: left failed, never undone, no result and no undo key.
    assert steps["take"]["status"] == "failed"
    assert steps["take"]["last_error"] == "HTTP 422 card declined"
    assert steps["take"]["result"] is None and steps["take"]["undo_key"] is None
    # The completed one shows the answer its work was given, and the key it was undone under.
    assert steps["hold"]["status"] == "compensated"
    assert steps["hold"]["result"] == {"id": "id-t-1.hold.do"}
    assert steps["hold"]["undo_key"] == "t-1.hold.undo"
    seen = [(e["event"], e.get("step")) for e in body["Timeline"]]
    assert seen == [
        ("received", None), ("do sent", "hold"), ("step_completed", "hold"), ("do sent", "take"),
        ("failed", "take"), ("undo sent", "hold"), ("step_compensated", "hold"),
        ("compensated", None)]
    failed = next(e for e in body["Timeline"] if e["event"] == "failed")
    assert failed["detail"] == "HTTP 422 card declined"
    assert failed["cause"] == "reply:take:do:1"


def test_list_orders_by_state_with_paging(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    for i in range(5):
        accept(f"p-{i}")
    failed_and_compensated(h, "f-1")
    with api(h) as c:
        seen: list[str] = []
        token = None
        while True:
            params = {"state": "Pending", "limit": "2", **({"continuation": token} if token
                                                          else {})}
            page = c.get("/orders", params=params).json()
            assert len(page["orders"]) <= 2
            seen += [o["OrderID"] for o in page["orders"]]
            token = page["continuation"]
            if not token:
                break
        assert sorted(seen) == [f"p-{i}" for i in range(5)]
        errors = c.get("/orders", params={"state": "Error"}).json()["orders"]
        assert [o["OrderID"] for o in errors] == ["f-1"]
        assert len(c.get("/orders").json()["orders"]) == 6


def test_list_orders_rejects_bad_parameters(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    with api(h) as c:
        for params, word in [({"state": "Lost"}, "Lost"), ({"limit": "many"}, "many"),
                             ({"limit": "0"}, "limit"), ({"continuation": "%%%"}, "continuation"),
                             # digits to str.isdigit(), not to int(), or too many for it: the
                             # fuzzer's finds, answered in Python's words (or read as 3)
                             ({"limit": "\u00b2"}, "whole number"),
                             ({"limit": "\u0663"}, "whole number"),
                             ({"limit": "9" * 5000}, "whole number")]:
            r = c.get("/orders", params=params)
            assert r.status_code == 400, params
            assert word in r.json()["error"], (params, r.json())
            assert "int()" not in r.json()["error"] and "sys." not in r.json()["error"]


def test_resubmit_a_failed_order(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    failed_and_compensated(h, "f-1")
    drain_json(h.env["SchedulerQueueName"])
    with api(h) as c:
        r = c.post("/orders/f-1/resubmit", json={"reason": "card limit raised"})
        assert r.status_code == 202, r.text
        body = r.json()
        assert (body["ProcessState"], body["FailureCount"], body["Resubmissions"]) == (
            "Pending", 0, 1)
        assert body["History"][0]["reason"] == "card limit raised"
        # Who did it, as the platform named them, kept with it.
        assert body["History"][0]["by"] == f"Ada Operator (oid {OPERATOR_OID})"
        assert "card declined" in body["History"][0]["previous_error"]
        # The Scheduler is asked to start it, and the work is new work for the services.
        (cmd,) = drain_json(h.env["SchedulerQueueName"])
        assert (cmd["kind"], cmd["order_id"]) == ("start", "f-1")
        h.container.scheduler.handle_command(json.dumps(cmd))
        (req,) = drain_json(h.env["AlphaRequestsQueueName"])
        assert req["idempotency_key"] == "f-1.hold.g1.do"
        # The refused step did nothing under its first key: it is asked afresh, under a new
        # one (a service answers a repeated key with its first answer, the refusal).
        h.container.scheduler.handle_reply(reply(req))
        (took,) = drain_json(h.env["BetaRequestsQueueName"])
        assert (took["action"], took["idempotency_key"]) == ("do", "f-1.take.g1.do")
        stored = h.container.store.get_state("f-1")
        assert stored is not None and stored.step("take").result is None
        # Now it is Processing: a second resubmit is refused.
        r = c.post("/orders/f-1/resubmit", json={})
        assert r.status_code == 409 and "Processing" in r.json()["error"]


def test_resubmits_with_the_longest_reason_in_any_script_never_outgrow_the_record(
        run_host: Any) -> None:
    """Bug: history capped by count, not size: a few resubmits with a long non-ASCII reason
    made the next one an empty 500 (PropertyValueTooLarge)."""
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    failed_and_compensated(h, "f-9")
    reason = "\U0001d11e\u0301" * (MAX_REASON // 2)  # non-BMP, each with a combining mark
    store = h.container.store
    with api(h) as c:
        for i in range(25):
            r = c.post("/orders/f-9/resubmit", json={"reason": reason})
            assert r.status_code == 202, (i, r.status_code, r.text[:200])
            # It fails again (as a service would make it) before the next resubmit.
            s = store.get_state("f-9")
            assert s is not None
            s.process_state, s.compensation = ProcessState.ERROR, CompensationState.DONE
            s.last_error = "\u00e9" * 5000
            store.save(s)
        history = r.json()["History"]
    assert 1 <= len(history) < 25 and history[-1]["reason"].startswith(reason[:100])
    assert budget.json_units(history) <= budget.HISTORY


def compensation_failed(h: RunningHost, order_id: str) -> None:
    """Drive one order to Error with its compensation failed, by hand: its first two steps done,
    the third refused, the second's undo refused (its work still stands)."""
    s = h.container.scheduler
    s.handle_command(accept(order_id))
    for step in (0, 1):
        (req,) = requests_of(h, step)
        s.handle_reply(reply(req))
    (refused,) = requests_of(h, 2)
    s.handle_reply(reply(refused, "permanent_error", "HTTP 422 no such address"))
    assert requests_of(h, 2) == []  # no undo of the refused step
    (undo,) = requests_of(h, 1)
    assert undo["action"] == "undo"
    s.handle_reply(reply(undo, "permanent_error", "HTTP 422 undo refused"))


def test_resubmit_after_a_failed_compensation_needs_force_and_redoes_nothing(
        run_host: Any) -> None:
    """Bug 1: a resubmit redid a step under a new key while the work done under its first key
    stood (in the shipped example, a card charged twice)."""
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    compensation_failed(h, "f-2")
    with api(h) as c:
        r = c.post("/orders/f-2/resubmit", json={"reason": "address fixed"})
        assert r.status_code == 409 and "force" in r.json()["error"]
        assert c.post("/orders/f-2/resubmit", json={"force": "yes"}).status_code == 400
        r = c.post("/orders/f-2/resubmit", json={"reason": "undone by hand",
                                                 "force": True})
        assert r.status_code == 202, r.text
        assert r.json()["History"][0]["forced"] is True
    (cmd,) = drain_json(h.env["SchedulerQueueName"])
    h.container.scheduler.handle_command(json.dumps(cmd))
    # The first step's work stands and is kept; the second, whose undo was refused, is asked
    # for again under the key it was done with, so its service answers with the work it has.
    assert drain_json(h.env["AlphaRequestsQueueName"]) == []
    (again,) = drain_json(h.env["BetaRequestsQueueName"])
    assert (again["idempotency_key"], again["action"]) == ("f-2.take.do", "do")


def test_resubmit_refusals(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    accept("o-1")
    with api(h) as c:
        assert c.post("/orders/ghost/resubmit", json={}).status_code == 404
        r = c.post("/orders/o-1/resubmit", json={})
        assert r.status_code == 409 and "Pending" in r.json()["error"]
        assert c.post("/orders/o-1/resubmit", content=b"not json",
                      headers={"Content-Type": "application/json"}).status_code == 400
        # As the Functions host: a method the route does not take is a 404 with no body.
        wrong = c.get("/orders/o-1/resubmit")
        assert (wrong.status_code, wrong.content) == (404, b"")
        assert c.request("TRACE", "/orders/o-1").status_code == 404


def test_health(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    # A machine route: a monitor's named function key, no identity.
    with httpx.Client(base_url=f"http://127.0.0.1:{h.port}/api", timeout=10,
                      headers={"x-functions-key": h.host.keys.function}) as c:
        r = c.get("/health")
        assert r.status_code == 200 and r.json()["status"] == "ok"
        h.container.queues.delete_queue(h.env["BetaRequestsQueueName"])
        r = c.get("/health")
        assert r.status_code == 503
        assert r.json()["checks"][f"queue:{h.env['BetaRequestsQueueName']}"] != "ok"


def test_http_requests_are_built_as_the_worker_builds_them(run_host: Any,
                                                           monkeypatch: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    accept("o:1")
    with api(h) as c:
        # Route values arrive percent-decoded.
        r = c.get("/orders/o%3A1")
        assert r.status_code == 200 and r.json()["OrderID"] == "o:1"
        # A repeated query key arrives as one value, joined with commas: not a state.
        r = c.get("/orders", params=[("state", "Error"), ("state", "Pending")])
        assert r.status_code == 400 and "Error,Pending" in r.json()["error"]
        # A function that fails: 500 with an empty body, nothing of the traceback.
        monkeypatch.setattr(h.container.operator, "get", lambda order_id: 1 / 0)
        r = c.get("/orders/o:1")
        assert (r.status_code, r.content) == (500, b"")


@pytest.mark.parametrize(("path", "body", "says"), [
    ("/orders/o-1/resubmit", {"reason": "x" * 100_000}, "reason"),
    ("/orders/o-1/resubmit", {"reason": 5}, "reason"),
    ("/orders/o-1/resubmit", {"force": "yes"}, "force"),
    ("/orders/o-1/resubmit", {"reasn": "typo"}, "reasn is not a field"),
    ("/orders/o-1/resubmit", ["reason"], "JSON object"),
    ("/orders/a%2Fb/resubmit", {"reason": "ok"}, "not an order id"),
    ("/orders/" + "x" * 200 + "/resubmit", {}, "not an order id"),
])
def test_bad_operator_input_is_a_400_that_says_why_and_changes_nothing(
        run_host: Any, path: str, body: Any, says: str) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    failed_and_compensated(h, "o-1")
    before = index_entries(h.env)
    with api(h) as c:
        r = c.post(path, json=body)
    assert r.status_code == 400 and says in r.json()["error"], r.text
    assert index_entries(h.env) == before  # no stale in-flight entry left behind
    assert h.container.store.get_state("o-1").process_state.value == "Error"


def test_a_bad_order_id_in_a_lookup_is_a_400(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    with api(h) as c:
        r = c.get("/orders/a%2Fb")
    assert r.status_code == 400 and "not an order id" in r.json()["error"]


def test_operator_routes_need_an_identity_not_a_key(run_host: Any) -> None:
    """Issue 32: the master key (or any key) used to be how an operator got in."""
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API | {"overview", "list_rejected"},
                              LOCALRUN_FUNCTION_KEY="fn-key", LOCALRUN_MASTER_KEY="master-key")
    failed_and_compensated(h, "f-5")
    base = f"http://127.0.0.1:{h.port}/api"
    for key in (None, "fn-key", "master-key"):
        headers = {"x-functions-key": key} if key else {}
        for method, path in [("GET", "/orders/f-5"), ("GET", "/orders"), ("GET", "/overview"),
                             ("GET", "/rejected"), ("POST", "/orders/f-5/resubmit")]:
            r = httpx.request(method, base + path, headers=headers, timeout=10)
            assert r.status_code == 401 and "sign in" in r.json()["error"], (key, path)
    assert h.container.operator.get("f-5").ProcessState == "Error"  # nothing resubmitted


def test_a_reader_reads_and_is_told_why_it_cannot_resubmit(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    failed_and_compensated(h, "f-6")
    with api(h, READ_ROLE) as c:
        assert c.get("/orders/f-6").json()["ProcessState"] == "Error"
        r = c.post("/orders/f-6/resubmit", json={"reason": "try again"})
        assert r.status_code == 403
        assert r.json()["error"] == ("Ada Operator lacks the app role 'Orders.Resubmit' this "
                                     "needs (has: Orders.Read)")
    with api(h, RESUBMIT_ROLE) as c:  # resubmit alone does not read
        assert c.get("/orders/f-6").status_code == 403
        assert c.post("/orders/f-6/resubmit", json={"reason": "ok"}).status_code == 202
    assert h.container.operator.get("f-6").Resubmissions == 1


def test_locally_the_development_principal_has_the_roles_it_is_given(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API,
                              OperatorDevelopmentRoles=f"{READ_ROLE},{RESUBMIT_ROLE}")
    failed_and_compensated(h, "f-7")
    with httpx.Client(base_url=f"http://127.0.0.1:{h.port}/api", timeout=10) as c:  # no header
        r = c.post("/orders/f-7/resubmit", json={"reason": "fixed locally"})
        assert r.status_code == 202, r.text
        assert r.json()["History"][0]["by"] == "local developer (oid development)"
        # A request's own principal still counts: the same role check as in Azure.
        r = c.post("/orders/f-7/resubmit", json={}, headers=signed_in(READ_ROLE))
        assert r.status_code == 403


def test_an_alert_is_acknowledged_once_with_who_and_when(run_host: Any) -> None:
    """Issue 33, item 4: alerts could only be read; nobody could say "seen, on it"."""
    h: RunningHost = run_host(workflows=TEST_FLOW, only={"list_alerts", "ack_alert", "overview"})
    failed_and_compensated(h, "f-8")
    with api(h) as c:
        (alert,) = c.get("/alerts").json()["alerts"]
        assert alert["Kind"] == "OrderFailed" and alert["AcknowledgedBy"] is None
        assert c.get("/alerts", params={"acknowledged": "true"}).json() == {"alerts": [],
                                                                          "truncated": False}
        with api(h, READ_ROLE) as reader:  # a reader looks, and is told why it cannot ack
            r = reader.post(f"/alerts/{alert['AlertId']}/ack", json={})
            assert r.status_code == 403 and "Orders.Resubmit" in r.json()["error"]
        r = c.post(f"/alerts/{alert['AlertId']}/ack", json={"note": "card service back"})
        assert r.status_code == 200, r.text
        acked = r.json()
        assert acked["AcknowledgedBy"] == f"Ada Operator (oid {OPERATOR_OID})"
        assert acked["AckNote"] == "card service back" and acked["AcknowledgedAt"]
        # Kept on the row: listed apart, and in the overview's own list.
        assert c.get("/alerts", params={"acknowledged": "false"}).json() == {"alerts": [],
                                                                           "truncated": False}
        (listed,) = c.get("/alerts", params={"acknowledged": "true"}).json()["alerts"]
        assert listed == acked
        overview = c.get("/overview").json()
        assert overview["Alerts"] == [] and overview["Acknowledged"] == [acked]
        # Once: a second acknowledgement names the first.
        again = c.post(f"/alerts/{alert['AlertId']}/ack", json={})
        assert again.status_code == 409
        assert f"acknowledged by Ada Operator (oid {OPERATOR_OID})" in again.json()["error"]
        assert c.get("/alerts", params={"acknowledged": "true"}).json()["alerts"] == [acked]
        # The same alert raised again (a replay) does not undo the acknowledgement.
        h.container.supervisor.tick()
        assert c.get("/alerts").json()["alerts"] == [acked]
        for path, body, status, says in [
                ("/alerts/20260101.0000000000001-000000000000/ack", {}, 404, "no alert"),
                ("/alerts/nope/ack", {}, 400, "not an alert id"),
                (f"/alerts/{alert['AlertId']}/ack", {"not": 1}, 400, "not a field"),
                (f"/alerts/{alert['AlertId']}/ack", {"note": "x" * 501}, 400, "note")]:
            r = c.post(path, json=body)
            assert r.status_code == status and says in r.json()["error"], (path, r.text)
        r = c.get("/alerts", params={"acknowledged": "yes"})
        assert r.status_code == 400 and "true or false" in r.json()["error"]


def test_bulk_resubmit_picks_failed_orders_dry_runs_first_and_names_the_operator(
        run_host: Any) -> None:
    """Issue 33, item 4: after an outage an operator resubmitted failed orders one by one."""
    h: RunningHost = run_host(workflows=TEST_FLOW, only={"resubmit_orders"})
    for oid in ("b-1", "b-2", "b-3"):
        failed_and_compensated(h, oid)  # failed at take
    compensation_failed(h, "b-4")  # failed at send, the undo of take refused
    accept("b-5")  # not failed: never picked
    with api(h) as c:
        # A dry run is the default: what each would come to, nothing written.
        r = c.post("/resubmissions", json={})
        assert r.status_code == 200, r.text
        result = r.json()
        assert result["DryRun"] is True and result["More"] is False
        outcome = {i["OrderID"]: i["Outcome"] for i in result["Items"]}
        assert outcome == {"b-1": "would resubmit", "b-2": "would resubmit",
                           "b-3": "would resubmit"}
        # One a resubmit would refuse without force (its compensation failed) is not picked,
        # only counted: a batch of those must never hold the others back (the review's).
        assert result["Skipped"] == 1
        assert all(h.container.store.get_state(o).generation == 0 for o in [*outcome, "b-4"])
        # Newest failure first, and filters: by step, by time; with force, b-4 is taken.
        forced = c.post("/resubmissions", json={"force": True}).json()
        assert [i["OrderID"] for i in forced["Items"]] == ["b-4", "b-3", "b-2", "b-1"]
        assert forced["Skipped"] == 0
        by_step = c.post("/resubmissions", json={"failed_step": "send",
                                                 "force": True}).json()
        assert [i["OrderID"] for i in by_step["Items"]] == ["b-4"]
        b2 = h.container.store.get_state("b-2").updated_at
        window = c.post("/resubmissions", json={"since": b2.isoformat(),
                                                "until": h.container.store.get_state(
                                                    "b-3").updated_at.isoformat()}).json()
        assert [i["OrderID"] for i in window["Items"]] == ["b-2"]
        # A bounded batch: the rest are said to be there.
        batch = c.post("/resubmissions", json={"limit": 2, "dry_run": False,
                                               "reason": "card service back"})
        assert batch.status_code == 202, batch.text
        assert [(i["OrderID"], i["Outcome"]) for i in batch.json()["Items"]] == [
            ("b-3", "resubmitted"), ("b-2", "resubmitted")]
        assert batch.json()["More"] is True
        state = h.container.store.get_state("b-3")
        assert (state.process_state, state.generation) == (ProcessState.PENDING, 1)
        assert state.history[-1]["by"] == f"Ada Operator (oid {OPERATOR_OID})"
        assert state.history[-1]["reason"] == "card service back"
        assert h.container.store.get_state("b-4").generation == 0  # skipped: untouched
        rest = c.post("/resubmissions", json={"dry_run": False, "force": True}).json()
        assert {i["OrderID"]: i["Outcome"] for i in rest["Items"]} == {
            "b-4": "resubmitted", "b-1": "resubmitted"}
        assert h.container.store.get_state("b-5").generation == 0
        for body, says in [({"state": "Pending"}, "only orders in Error"),
                           ({"limit": 101}, "limit"), ({"since": "yesterday"}, "since"),
                           ({"since": "2026-11-25T08:00:00"}, "since"),  # no zone
                           ({"orders": ["b-1"]}, "not a field"), ([1], "JSON object")]:
            r = c.post("/resubmissions", json=body)
            assert r.status_code == 400 and says in r.json()["error"], (body, r.text)
    with api(h, READ_ROLE) as reader:
        r = reader.post("/resubmissions", json={})
        assert r.status_code == 403 and "Orders.Resubmit" in r.json()["error"]


def test_orders_are_found_by_the_start_of_their_id_and_by_customer(run_host: Any) -> None:
    # Its message names the customer's column (the plain test workflow's names none).
    h: RunningHost = run_host(workflows=BY_CUSTOMER, only=API)
    failed_and_compensated(h, "find-1")
    accept("find-2")
    accept("other-1")
    with api(h) as c:
        def ids(**params: str) -> list[str]:
            r = c.get("/orders", params=params)
            assert r.status_code == 200, r.text
            return sorted(o["OrderID"] for o in r.json()["orders"])

        assert ids(prefix="find-") == ["find-1", "find-2"]
        assert ids(prefix="find-", state="Error") == ["find-1"]
        assert ids(customer="c-1", state="Pending") == ["find-2", "other-1"]
        assert ids(customer="c-1", prefix="oth") == ["other-1"]
        assert ids(customer="nobody") == []
        assert c.get("/orders", params={"customer": "c-1"}).json()["continuation"] is None
        for params, says in [({"prefix": "a b"}, "not the start of an order id"),
                             ({"customer": "x" * 129}, "customer"),
                             ({"customer": "c-1", "continuation": "abc"}, "one page")]:
            r = c.get("/orders", params=params)
            assert r.status_code == 400 and says in r.json()["error"], (params, r.text)
