"""Pausing and resuming, over real HTTP through the local host, against Azurite, on the engine's
test workflow (hold, take, send on alpha, beta, gamma): a paused service's Agent calls nothing,
a paused workflow's new order waits Pending, the Supervisor holds their time and no failure is
counted; each pause shows with who and since when; what does not apply is refused, saying why.
(The pause stores on Azurite and in memory: test_store_contract.py.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.domain.pauses import LAG
from shared.handlers.principal import PAUSE_ROLE, READ_ROLE, RESUBMIT_ROLE
from tests.integration.conftest import RunningHost
from tests.integration.helpers import drain_json, pending
from tests.integration.test_agents import effects, request
from tests.integration.test_operator_api import OPERATOR_OID, api
from tests.workflow import REGISTRY as TEST_FLOW

API = {"list_pauses", "pause", "resume", "overview", "health_details", "simulated_service"}
BY = f"Ada Operator (oid {OPERATOR_OID})"


def test_a_paused_service_is_not_called_and_its_step_waits_uncounted(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    with api(h, READ_ROLE, PAUSE_ROLE) as c:
        r = c.post("/pauses/service/beta", json={"reason": "provider incident 4711"})
        assert r.status_code == 200, r.text
        assert {"Kind": "service", "Name": "beta", "Paused": True, "By": BY,
                "Reason": "provider incident 4711"}.items() <= r.json().items()
        listed = c.get("/pauses").json()["Pauses"]
        assert (listed[0]["Name"], listed[0]["Paused"]) == ("beta", True)
        assert {p["Name"] for p in listed} == {"alpha", "beta", "gamma", "test-flow"}
        assert [p["Name"] for p in c.get("/overview").json()["Paused"]] == ["beta"]
        assert [p["By"] for p in c.get("/health/details").json()["paused"]] == [BY]
    # Its Agent calls nothing and answers nothing.
    assert h.container.agents["beta"].handle(request(h)) is None
    assert effects(h) == []
    # The Supervisor holds the step past its time: no failure counted, nothing sent.
    store, sup = h.container.store, h.container.supervisor
    state = store.get_state("o-1")
    assert state is not None and state.complete_by is not None
    sup._clock = lambda: state.complete_by + timedelta(seconds=1)  # type: ignore[method-assign]
    report = sup.tick()
    held = store.get_state("o-1")
    assert report.held == 1 and held is not None
    assert (held.held, held.failure_count, held.process_state.value) == (
        "service:beta", 0, "Processing")
    assert held.schema_version == 5  # a release before pauses leaves it alone
    assert "waiting: service beta paused by" in held.timeline[-1]["detail"]
    assert held.outbox == []  # said once: a later look says nothing again
    assert drain_json(h.container.config.services["beta"].queue) == []
    # Looked at again an hour later, still paused: outside the tick's budget, nothing said.
    sup._clock = lambda: held.complete_by + timedelta(seconds=1)  # type: ignore[method-assign,operator]
    again = sup.tick()
    assert (again.held, again.held_again, again.deferred) == (0, 1, 0)
    held = store.get_state("o-1")
    assert held is not None and held.held == "service:beta" and held.failure_count == 0
    with api(h, READ_ROLE, PAUSE_ROLE) as c:
        r = c.post("/pauses/service/beta/resume", json={"reason": "provider back"})
        assert r.status_code == 200 and r.json()["Paused"] is False, r.text
        assert len(r.json()["LastPaused"]) == 1
    # Once resumed, the step is sent again at the first tick every instance knows it (found
    # by its pause), long before the time its hold filed it under: the same attempt and key,
    # its whole budget.
    sup._clock = lambda: datetime.now(UTC) + LAG  # type: ignore[method-assign]
    assert held.complete_by is not None and held.complete_by > sup._clock() + timedelta(minutes=5)
    assert sup.tick().released == 1
    (again,) = drain_json(h.container.config.services["beta"].queue)
    assert (again["attempt"], again["idempotency_key"]) == (1, "o-1.take.do")
    released = store.get_state("o-1")
    assert released is not None and (released.held, released.failure_count) == (None, 0)


def test_a_paused_workflows_new_order_waits_pending(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    with api(h, READ_ROLE, PAUSE_ROLE) as c:
        assert c.post("/pauses/workflow/test-flow", json={"reason": "price change"}
                      ).status_code == 200
    result = h.container.scheduler.handle_command(pending("w-1"))
    assert result.outcome == "ignored" and "waits: workflow test-flow paused" in result.detail
    state = h.container.store.get_state("w-1")
    assert state is not None and state.process_state.value == "Pending"
    assert drain_json(h.container.config.services["alpha"].queue) == []


def test_what_does_not_apply_is_refused_saying_why(run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    with api(h, READ_ROLE, PAUSE_ROLE) as c:
        assert c.post("/pauses/service/beta", json={}).status_code == 400
        assert c.post("/pauses/service/beta", json=[1]).status_code == 400
        r = c.post("/pauses/service/nope", json={"reason": "x"})
        assert r.status_code == 404 and "alpha, beta, gamma" in r.json()["error"], r.text
        r = c.post("/pauses/queue/beta", json={"reason": "x"})
        assert r.status_code == 400 and "service or workflow" in r.json()["error"]
        r = c.post("/pauses/service/beta/resume", json={})
        assert r.status_code == 409 and "not paused" in r.json()["error"]
        assert c.post("/pauses/service/beta", json={"reason": "x"}).status_code == 200
        r = c.post("/pauses/service/beta", json={"reason": "x"})
        assert r.status_code == 409 and "paused already, by " + BY in r.json()["error"]
    with api(h, READ_ROLE, RESUBMIT_ROLE) as c:  # resubmitting is not pausing
        r = c.post("/pauses/service/alpha", json={"reason": "x"})
        assert r.status_code == 403 and "Orders.Pause" in r.json()["error"]



def test_the_cli_pauses_and_resumes_straight_to_storage_and_lists_them(
        app_env: Any, capsys: Any) -> None:
    from orderctl.main import run

    app_env()
    settings = ["--settings", "/nonexistent/local.settings.json"]
    assert run([*settings, "pause", "service", "payment"]) == 2
    assert "--reason is required" in capsys.readouterr().err
    assert run([*settings, "pause", "service", "paymnet", "--reason", "x"]) == 2
    assert "no service 'paymnet' (this app's services: email, inventory" in (
        capsys.readouterr().err)
    assert run([*settings, "pause", "service", "payment", "--reason", "PSP incident"]) == 0
    assert "service payment paused" in capsys.readouterr().out
    assert run([*settings, "pause", "service", "payment", "--reason", "again"]) == 1
    assert "paused already" in capsys.readouterr().err
    assert run([*settings, "pauses", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert (listed[0]["Name"], listed[0]["State"], listed[0]["Reason"]) == (
        "payment", "paused", "PSP incident")
    assert {p["Name"] for p in listed} == {"inventory", "payment", "shipping", "email",
                                           "digital-delivery", "order-fulfilment"}
    run([*settings, "health"])  # unhealthy here (no Supervisor ticks): the pause shows all the same
    assert "paused: service payment by " in capsys.readouterr().out
    assert run([*settings, "resume", "service", "payment"]) == 0
    assert "service payment resumed" in capsys.readouterr().out
    assert run([*settings, "resume", "service", "payment"]) == 1
    assert "not paused" in capsys.readouterr().err
