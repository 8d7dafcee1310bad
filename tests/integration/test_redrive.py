"""Re-drives over real HTTP through the local host and through the CLI, against Azurite: a
dry run counts what one would pick, a start is audited and runs in the background (its runner
driven here by hand), its progress shows, and pause, resume and cancel apply or are refused,
saying why. (The runner's guarantees, crashes included, on the fakes: tests/unit/test_redrive.py;
the re-drive store on Azurite and in memory: test_store_contract.py.)"""

from __future__ import annotations

import json
from typing import Any

from shared.handlers.principal import READ_ROLE, RESUBMIT_ROLE
from tests.integration.conftest import RunningHost
from tests.integration.test_operator_api import OPERATOR_OID, api, failed_and_compensated
from tests.workflow import REGISTRY as TEST_FLOW

API = {"start_redrive", "list_redrives", "get_redrive", "change_redrive", "get_order"}
BY = f"Ada Operator (oid {OPERATOR_OID})"


def test_a_redrive_over_http_resubmits_the_failed_orders_and_shows_its_progress(
        run_host: Any) -> None:
    h: RunningHost = run_host(workflows=TEST_FLOW, only=API)
    for oid in ("f-1", "f-2", "f-3"):
        failed_and_compensated(h, oid)
    with api(h, READ_ROLE, RESUBMIT_ROLE) as c:
        preview = c.post("/redrives", json={"failed_step": "take", "error_text": "DECLINED"})
        assert preview.status_code == 200, preview.text
        assert (preview.json()["Matched"], preview.json()["Rate"]) == (3, 10)
        r = c.post("/redrives", json={"failed_step": "take", "dry_run": False})
        assert r.status_code == 400 and "needs a reason" in r.json()["error"]
        r = c.post("/redrives", json={"failed_step": "tkae", "reason": "x", "dry_run": False})
        assert r.status_code == 404 and "no step 'tkae'" in r.json()["error"]
        r = c.post("/redrives", json={"failed_step": "take", "reason": "card network back",
                                      "rate": 50, "dry_run": False})
        assert r.status_code == 202, (r.status_code, r.text)
        started = r.json()
        assert (started["State"], started["By"], started["Rate"]) == ("running", BY, 50)
        rid = started["Id"]
        assert [x["Id"] for x in c.get("/redrives").json()["Redrives"]] == [rid]
    h.container.redriver.run(8)  # the timer's run, by hand
    with api(h, READ_ROLE, RESUBMIT_ROLE) as c:
        view = c.get(f"/redrives/{rid}").json()
        assert (view["State"], view["Resubmitted"], view["Refused"]) == ("done", 3, 0)
        for oid in ("f-1", "f-2", "f-3"):
            order = c.get(f"/orders/{oid}").json()
            assert (order["ProcessState"], order["Resubmissions"]) == ("Pending", 1)
        r = c.post(f"/redrives/{rid}/pause", json={"reason": "x"})
        assert r.status_code == 409 and "only a running one" in r.json()["error"]
        r = c.post(f"/redrives/{rid}/restart", json={})
        assert r.status_code == 400 and "paused, resumed or cancelled" in r.json()["error"]
        assert c.get("/redrives/rd-nope").status_code == 404
        assert c.get("/redrives/nope").status_code == 404
    with api(h, READ_ROLE) as c:  # reading is not re-driving
        r = c.post("/redrives", json={"reason": "x", "dry_run": False})
        assert r.status_code == 403 and "Orders.Resubmit" in r.json()["error"]


def test_the_cli_starts_watches_pauses_resumes_and_cancels_a_redrive(
        app_env: Any, capsys: Any, monkeypatch: Any) -> None:
    from orderctl.main import run
    from shared import bootstrap

    app_env()
    settings = ["--settings", "/nonexistent/local.settings.json"]
    assert run([*settings, "redrive", "--failed-step", "charge_payment", "--dry-run"]) == 0
    assert "would pick 0 of 0 failed orders read: failed at charge_payment" in (
        capsys.readouterr().out)
    assert run([*settings, "redrive", "--failed-step", "charge_payment"]) == 2
    assert "--reason is required" in capsys.readouterr().err
    assert run([*settings, "redrive", "--failed-step", "chrage", "--reason", "x"]) == 2
    assert "no step 'chrage'" in capsys.readouterr().err
    assert run([*settings, "redrive", "--failed-step", "charge_payment", "--reason",
                "PSP back", "--rate", "20", "--json"]) == 0
    rid = json.loads(capsys.readouterr().out)["Id"]
    assert run([*settings, "redrives", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["Id"], listed["State"], listed["Rate"]) == (rid, "running", 20.0)
    monkeypatch.setenv("COLUMNS", "80")  # the id whole, to copy into the commands below
    assert run([*settings, "redrives"]) == 0
    assert rid in capsys.readouterr().out
    assert run([*settings, "redrives", "pause", rid, "--reason", "looking"]) == 0
    assert f"re-drive {rid}: paused" in capsys.readouterr().err
    assert run([*settings, "redrives", "show", rid]) == 0
    assert "paused" in capsys.readouterr().out
    assert run([*settings, "redrives", "resume", rid]) == 0
    bootstrap.container().redriver.run(8)
    assert run([*settings, "redrives", "show", rid, "--watch"]) == 0  # ends: it is done
    assert f"{rid} done: 0 resubmitted" in capsys.readouterr().out
    assert run([*settings, "redrives", "cancel", rid]) == 1
    assert "done already" in capsys.readouterr().err
    assert run([*settings, "redrives", "show", "rd-0000000000000-00000000"]) == 1
    assert "no re-drive" in capsys.readouterr().err
