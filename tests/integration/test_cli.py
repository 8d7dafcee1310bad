"""The orders CLI against Azurite: every command, and its errors as one line and an exit code."""

from __future__ import annotations

import getpass
import itertools
import json
import re
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from localrun.servicebus import LocalServiceBusChannel
from orderctl import connection, sending
from orderctl import main as cli_main
from orderctl.main import run
from shared.adapters import alerts as alerts_adapter
from shared.handlers.operator import Operator
from shared.handlers.principal import READ_ROLE, RESUBMIT_ROLE
from tests.conftest import ROOT
from tests.integration.conftest import RunningHost
from tests.integration.helpers import entities, function, order, sb_message
from tests.integration.test_operator_api import compensation_failed, failed_and_compensated

NO_SETTINGS = ["--settings", "/nonexistent/local.settings.json"]


def orders(*args: str) -> int:
    return run([*NO_SETTINGS, *args])


@pytest.fixture
def env(app_env: Any) -> dict[str, str]:
    return app_env()


def test_send_local_generated_orders_prints_their_ids(
        env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert orders("send", "--local", "--count", "3", "--seed", "1") == 0
    ids = capsys.readouterr().out.split()
    assert len(ids) == 3 and len(set(ids)) == 3
    from shared import bootstrap

    channel = LocalServiceBusChannel(bootstrap.container().queues, env["OrdersQueueName"])
    sent = [json.loads(m.content) for m in channel.queue.peek_messages(max_messages=32)]
    assert [m["message_id"] for m in sent] == ids  # message id = order id
    import base64

    bodies = [json.loads(base64.b64decode(m["body"])) for m in sent]
    assert [b["order_id"] for b in bodies] == ids
    assert all(m["application_properties"]["source"] == "orders-cli" for m in sent)


def test_send_names_the_workflow_the_orders_follow(
        env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    import base64

    from shared import bootstrap

    assert orders("send", "--local", "--count", "2", "--workflow", "digital-delivery",
                  "--workflow", "order-fulfilment") == 0
    channel = LocalServiceBusChannel(bootstrap.container().queues, env["OrdersQueueName"])
    bodies = [json.loads(base64.b64decode(json.loads(m.content)["body"]))
              for m in channel.queue.peek_messages(max_messages=32)]
    assert [b["workflow"] for b in bodies] == ["digital-delivery", "order-fulfilment"]
    assert orders("send", "--local", "--workflow", "no-such") == 2
    err = capsys.readouterr().err
    assert "--workflow: no workflow no-such" in err and "digital-delivery" in err


def test_send_from_a_json_lines_file(env: dict[str, str], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "orders.jsonl"
    f.write_text(json.dumps(order("f-1")) + "\n\n" + json.dumps(order("f-2")) + "\nnot json\n")
    assert orders("send", "--local", "--file", str(f)) == 0
    out = capsys.readouterr().out.split()
    assert out[:2] == ["f-1", "f-2"] and len(out) == 3  # the bad line is sent for intake to record


def test_send_needs_exactly_one_target(env: dict[str, str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert orders("send", "--count", "1") == 2
    assert orders("send", "--local", "--namespace", "x") == 2
    assert "choose one of" in capsys.readouterr().err


def test_status_of_an_order_and_of_an_unknown_one(env: dict[str, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    function("intake")(msg=sb_message(order("o-1"), message_id="o-1"))
    assert orders("status", "o-1") == 0
    text = capsys.readouterr().out
    assert "o-1" in text and "Processing" in text and "reserve_inventory" in text
    assert "Workflow: order-fulfilment v1" in text  # the version it started on
    assert orders("status", "o-1", "--json") == 0
    assert json.loads(capsys.readouterr().out)["ProcessState"] == "Processing"
    assert orders("status", "ghost") == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == "error: no order 'ghost'"
    assert "Traceback" not in captured.err


def test_status_says_an_order_is_held_by_a_pause_and_how_it_ends(
        env: dict[str, str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its step shows "running" with a complete-by an hour on (the safety net's): the mark is
    what says it waits, uncounted, for a resume."""
    from shared import bootstrap

    monkeypatch.setenv("COLUMNS", "200")
    function("intake")(msg=sb_message(order("h-1"), message_id="h-1"))
    store = bootstrap.container().store
    state = store.get_state("h-1")
    assert state is not None
    state.held = "service:inventory"
    store.save(state)
    assert orders("status", "h-1") == 0
    text = capsys.readouterr().out
    assert "Held: service:inventory" in text and "orders resume service inventory" in text
    function("intake")(msg=sb_message(order("h-2"), message_id="h-2"))
    assert orders("status", "h-2") == 0
    assert "Held" not in capsys.readouterr().out


def test_list_by_state_with_pages(env: dict[str, str], capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # a row on one line, to read it back
    for i in range(3):
        function("intake")(msg=sb_message(order(f"p-{i}"), message_id=f"p-{i}"))
    assert orders("list", "--state", "Processing", "--limit", "2", "--json") == 0
    page = json.loads(capsys.readouterr().out)
    assert len(page["orders"]) == 2 and page["continuation"]
    assert orders("list", "--state", "Processing", "--limit", "2", "--continuation",
                  page["continuation"], "--json") == 0
    rest = json.loads(capsys.readouterr().out)
    assert len(rest["orders"]) == 1
    assert orders("list", "--state", "Processing", "--limit", "2") == 0
    shown = capsys.readouterr()
    assert "--continuation" in shown.err
    assert "order-fulfilment v1" in shown.out  # each order's workflow and version
    assert orders("list", "--state", "Lost") == 2
    assert "Lost" in capsys.readouterr().err
    assert orders("list", "--state", "Error") == 0  # none of that state: said, not an error
    nothing = capsys.readouterr()
    assert (nothing.out, nothing.err.strip()) == ("", "none")


def test_watch_follows_orders_until_settled(run_host: Any,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    h: RunningHost = run_host(only={"intake", "scheduler_commands", "scheduler_replies",
                                    "inventory_agent", "payment_agent", "shipping_agent",
                                    "simulated_service", "simulated_provider"})
    assert orders("send", "--local", "--count", "3") == 0
    ids = capsys.readouterr().out.split()
    assert orders("watch", *ids, "--timeout", "60", "--interval", "0.2") == 0
    text = capsys.readouterr().out
    assert all(i in text for i in ids) and text.count("Processed") == 3
    assert all(s["ProcessState"] == "Processed" for s in entities(
        h.env["StateTableName"], "RowKey eq 'state'"))


def test_watch_gives_up_after_its_timeout(env: dict[str, str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    function("intake")(msg=sb_message(order("stuck"), message_id="stuck"))
    assert orders("watch", "stuck", "never-sent", "--timeout", "0.5", "--interval", "0.1") == 1
    captured = capsys.readouterr()
    assert "2 order(s) not settled" in captured.err
    assert "not received" in captured.out


def test_resubmit(run_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    h: RunningHost = run_host(only=set())
    failed_and_compensated(h, "f-1")
    assert orders("resubmit", "f-1", "--reason", "card replaced") == 0
    assert "resubmitted" in capsys.readouterr().out
    # Straight to storage: the storage role was the check; the login name is what it knows.
    assert h.container.store.get_state("f-1").history[-1]["by"] == (
        f"{getpass.getuser()} (orders CLI, storage key: not an identity)")
    assert orders("resubmit", "f-1") == 1
    assert "Pending" in capsys.readouterr().err
    assert orders("resubmit", "ghost") == 1


def test_resubmit_with_force(run_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    h: RunningHost = run_host(only=set())
    compensation_failed(h, "f-2")
    assert orders("resubmit", "f-2") == 1
    assert "resubmit with force" in capsys.readouterr().err
    assert orders("resubmit", "f-2", "--force", "--reason", "refunded by hand") == 0
    assert "resubmitted" in capsys.readouterr().out


def test_alerts_and_rejected(run_host: Any, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    h: RunningHost = run_host(only=set())
    failed_and_compensated(h, "f-1")
    function("intake")(msg=sb_message(b"{oops", message_id="bad-1"))
    assert orders("alerts", "--json") == 0
    (alert,) = json.loads(capsys.readouterr().out)
    assert (alert["Kind"], alert["OrderID"]) == ("OrderFailed", "f-1")
    assert orders("rejected", "--json") == 0
    (rej,) = json.loads(capsys.readouterr().out)["rejected"]
    assert rej["MessageId"] == "bad-1" and "JSON" in rej["Reason"]
    assert orders("alerts") == 0 and "OrderFailed" in capsys.readouterr().out
    monkeypatch.setattr(alerts_adapter, "ALERT_SCAN", 0)  # the listing's scan stops at once
    assert orders("alerts", "--open", "--json") == 0
    said = capsys.readouterr()
    assert json.loads(said.out) == []  # still the list a script reads; the warning beside it
    assert "alerts of the last 7 days and stopped: older ones are not shown" in said.err


def test_rejected_pages_newest_sent_first(run_host: Any,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    run_host(only=set())
    intake = function("intake")
    sent = datetime(2026, 5, 1, tzinfo=UTC)
    # Rejected in an order other than they were sent; the third one is delivered twice.
    for minute in (3, 0, 4, 1, 2, 3):
        intake(msg=sb_message(b"{oops", message_id=f"bad-{minute}",
                              enqueued=sent + timedelta(minutes=minute),
                              delivery_count=2 if minute == 3 else 1))
    seen: list[str] = []
    token: list[str] = []
    for _ in range(3):
        assert orders("rejected", "--json", "--limit", "2", *token) == 0
        page = json.loads(capsys.readouterr().out)
        assert len(page["rejected"]) <= 2
        seen += [r["MessageId"] for r in page["rejected"]]
        if not page["continuation"]:
            break
        token = ["--continuation", page["continuation"]]
    assert seen == ["bad-4", "bad-3", "bad-2", "bad-1", "bad-0"]
    assert orders("rejected", "--continuation", "garbage") == 2


def test_unreachable_storage_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from shared.settings import AZURITE_CONNECTION

    unreachable = AZURITE_CONNECTION.replace(":10001/", ":9/").replace(":10002/", ":9/")
    assert run([*NO_SETTINGS, "--storage", unreachable, "status", "o-1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: storage unreachable")


def test_bad_connection_string_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*NO_SETTINGS, "--storage", "not-a-connection-string", "list"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "malformed" in lines[0]


COMMANDS = (["send"], ["status"], ["list"], ["watch"], ["resubmit"], ["cancel"], ["pause"],
            ["resume"], ["pauses"], ["redrive"], ["redrives"], ["redrives", "show"],
            ["redrives", "pause"], ["redrives", "resume"], ["redrives", "cancel"], ["alerts"],
            ["alerts", "ack"], ["rejected"], ["health"], ["trace"])


def test_every_command_has_help_and_json_for_scripts(
        capsys: pytest.CaptureFixture[str]) -> None:
    from typer.main import get_command

    # Every command the CLI has is in the list above (a new one must be added to it).
    root = get_command(cli_main.app)
    names = {(n,) for n in root.commands} | {  # type: ignore[attr-defined]
        (n, s) for n, c in root.commands.items()  # type: ignore[attr-defined]
        for s in getattr(c, "commands", {})}
    assert names == {tuple(c) for c in COMMANDS}
    for cmd in COMMANDS:
        assert run([*cmd, "--help"]) == 0, cmd
        text = capsys.readouterr().out
        assert "Usage" in text and "--json" in text, cmd


def test_ctrl_c_exits_130(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    import orderctl.sending as cli

    def interrupted(_: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.time, "sleep", interrupted)
    assert orders("send", "--local", "--count", "3", "--rate", "1") == 130


def test_a_malformed_service_bus_connection_string_is_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*NO_SETTINGS, "send", "--connection-string", "garbage"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--connection-string" in lines[0] and "malformed" in lines[0]


def test_a_bad_order_id_is_one_line(env: dict[str, str],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert orders("status", "a/b") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "not an order id" in lines[0]


def test_resubmit_prints_only_its_answer(run_host: Any,
                                         capfd: pytest.CaptureFixture[str]) -> None:
    h: RunningHost = run_host(only=set())
    failed_and_compensated(h, "f-9")
    capfd.readouterr()
    assert orders("resubmit", "f-9", "--reason", "fixed") == 0
    captured = capfd.readouterr()
    assert captured.out.strip() == "f-9 resubmitted: Pending (resubmission 1)"
    assert captured.err == ""


def test_order_ids_stay_whole_in_a_narrow_terminal(
        env: dict[str, str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    long_id = "customer-4711.order-2026-11-22T05:59:01.123456"
    function("intake")(msg=sb_message(order(long_id), message_id=long_id))
    assert orders("list") == 0
    assert long_id in capsys.readouterr().out


def test_send_local_to_unreachable_storage_is_one_line_and_quick(
        capsys: pytest.CaptureFixture[str]) -> None:
    import time

    from shared.settings import AZURITE_CONNECTION

    unreachable = AZURITE_CONNECTION.replace(":10001/", ":9/").replace(":10002/", ":9/")
    t0 = time.monotonic()
    assert run([*NO_SETTINGS, "--storage", unreachable, "send", "--local"]) == 2
    took = time.monotonic() - t0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: storage unreachable")
    assert took < 10, took  # it took 19 s with the queue client's default retry policy


def test_watch_reports_a_rejected_message_at_once(env: dict[str, str], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """It used to wait its whole timeout for an order that intake had already refused."""
    f = tmp_path / "orders.jsonl"
    f.write_text("not json\n")
    assert orders("send", "--local", "--file", str(f)) == 0
    ids = capsys.readouterr().out.split()
    intake = function("intake")
    from shared import bootstrap

    channel = LocalServiceBusChannel(bootstrap.container().queues, env["OrdersQueueName"])
    import base64

    for m in channel.queue.receive_messages():
        sent = json.loads(m.content)
        intake(msg=sb_message(base64.b64decode(sent["body"]), message_id=sent["message_id"]))
    assert orders("watch", *ids, "--timeout", "30", "--interval", "0.1") == 1
    captured = capsys.readouterr()
    assert "1 message(s) rejected" in captured.err and "not settled" not in captured.err
    assert "rejected" in captured.out and "invalid" in captured.out


def test_resubmit_through_the_operator_api_as_the_development_principal(
        run_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    h: RunningHost = run_host(only={"resubmit_order"},
                              OperatorDevelopmentRoles=f"{READ_ROLE},{RESUBMIT_ROLE}")
    failed_and_compensated(h, "f-3")
    api = f"http://127.0.0.1:{h.port}/api"
    assert orders("--api", api, "resubmit", "f-3", "--reason", "card replaced") == 0
    assert "f-3 resubmitted: Pending (resubmission 1)" in capsys.readouterr().out
    assert h.container.store.get_state("f-3").history[-1]["by"] == (
        "local developer (oid development)")
    assert orders("--api", api, "resubmit", "f-3") == 1  # refused by the API: said as it said
    assert "Pending" in capsys.readouterr().err


def test_resubmit_through_the_api_says_what_is_missing(
        run_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    h: RunningHost = run_host(only={"resubmit_order"})  # no development principal: signed out
    failed_and_compensated(h, "f-4")
    api = f"http://127.0.0.1:{h.port}/api"
    assert orders("--api", api, "resubmit", "f-4") == 2
    e = capsys.readouterr().err
    assert "not signed in" in e and "--token" in e and "Traceback" not in e
    h2: RunningHost = run_host(only={"resubmit_order"}, OperatorDevelopmentRoles=READ_ROLE)
    assert orders("--api", f"http://127.0.0.1:{h2.port}/api", "resubmit", "f-4") == 2
    assert "lacks the app role 'Orders.Resubmit'" in capsys.readouterr().err
    assert h.container.store.get_state("f-4").process_state.value == "Error"


def test_the_token_goes_as_a_bearer_header_from_the_environment(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sent: list[httpx.Request] = []

    def request(method: str, url: str, **kw: Any) -> httpx.Response:
        sent.append(httpx.Request(method, url, headers=kw["headers"], json=kw["json"]))
        return httpx.Response(202, json={"ProcessState": "Pending", "Resubmissions": 2})

    monkeypatch.setattr(connection.httpx, "request", request)
    monkeypatch.setenv("ORDERS_API_URL", "https://app.example/api/")
    monkeypatch.setenv("ORDERS_API_TOKEN", "eyJ.token")
    assert orders("resubmit", "a/b", "--reason", "fixed") == 0
    (req,) = sent
    assert str(req.url) == "https://app.example/api/orders/a%2Fb/resubmit"
    assert req.headers["authorization"] == "Bearer eyJ.token"
    assert json.loads(req.content) == {"reason": "fixed", "force": False}


def test_health_through_the_api_and_straight_to_storage(
        run_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    h: RunningHost = run_host(only={"health_details"}, OperatorDevelopmentRoles=READ_ROLE)
    api = f"http://127.0.0.1:{h.port}/api"
    # A store no Supervisor ever ticked on: said, and exit 1.
    assert orders("--api", api, "health") == 1
    captured = capsys.readouterr()
    assert "status: ok" in captured.out and "payment closed" in captured.out
    assert "Supervisor: no tick recorded yet" in captured.err
    h.container.supervisor.tick()
    assert orders("--api", api, "health", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["breakers"]["payment"] == "closed" and report["supervisor"]["late"] is False
    assert report["backlog"][h.env["SchedulerQueueName"]] == 0
    # Straight to storage the CLI cannot know the app's breakers, and says so.
    assert orders("health") == 0
    assert "pass --api to read them" in capsys.readouterr().out
    h.container.queues.delete_queue(h.env["PaymentRequestsQueueName"])
    assert orders("health") == 1
    assert f"queue:{h.env['PaymentRequestsQueueName']}: does not exist" in (
        capsys.readouterr().err)


def test_alerts_ack_straight_to_storage_and_through_the_api(
        run_host: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    h: RunningHost = run_host(only={"ack_alert"},
                              OperatorDevelopmentRoles=f"{READ_ROLE},{RESUBMIT_ROLE}")
    failed_and_compensated(h, "f-1")
    compensation_failed(h, "f-2")
    assert orders("alerts", "--open", "--json") == 0
    first, second, third = json.loads(capsys.readouterr().out)
    assert orders("alerts", "ack", third["AlertId"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "120")
    assert orders("alerts", "--wide") == 0
    shown = capsys.readouterr().out
    assert first["AlertId"] in shown  # whole, however narrow the terminal
    # Too many columns for 120: a block an alert, each field named and whole on its line.
    block = shown.splitlines()
    assert f"  OrderID: {first['OrderID']}" in block and f"  Kind: {first['Kind']}" in block
    assert all(len(line) <= 120 for line in block), [x for x in block if len(x) > 120]
    monkeypatch.setenv("COLUMNS", "400")
    assert orders("alerts", "--wide") == 0
    table = capsys.readouterr().out.splitlines()  # wide enough: one table, under its headers
    assert table[0].startswith("┏") and table[1].split("┃")[1].strip() == "AlertId", table
    assert orders("alerts", "ack", first["AlertId"], "--note", "looked at it") == 0
    assert "acknowledged by" in capsys.readouterr().out
    api = f"http://127.0.0.1:{h.port}/api"
    assert orders("--api", api, "alerts", "ack", second["AlertId"], "--json") == 0
    assert json.loads(capsys.readouterr().out)["AlertId"] == second["AlertId"]
    assert orders("alerts", "--acknowledged", "--json") == 0
    by = {a["AlertId"]: a["AcknowledgedBy"] for a in json.loads(capsys.readouterr().out)}
    by_key = f"{getpass.getuser()} (orders CLI, storage key: not an identity)"
    assert by == {first["AlertId"]: by_key,
                  second["AlertId"]: "local developer (oid development)",
                  third["AlertId"]: by_key}
    assert orders("alerts", "--open", "--json") == 0
    assert json.loads(capsys.readouterr().out) == []
    # Once, and said in one line either way.
    assert orders("alerts", "ack", first["AlertId"]) == 1
    assert "was acknowledged by" in capsys.readouterr().err
    assert orders("--api", api, "alerts", "ack", first["AlertId"]) == 1
    assert "was acknowledged by" in capsys.readouterr().err
    assert orders("alerts", "ack", "nope") == 2
    assert "not an alert id" in capsys.readouterr().err


def test_bulk_resubmit_with_a_dry_run_then_for_real(
        run_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    h: RunningHost = run_host(only={"resubmit_orders"},
                              OperatorDevelopmentRoles=f"{READ_ROLE},{RESUBMIT_ROLE}")
    failed_and_compensated(h, "b-1")
    failed_and_compensated(h, "b-2")
    compensation_failed(h, "b-3")
    # The dry run names each order and what it would come to; one a resubmit would refuse
    # (its compensation failed, no --force) is not picked, and said.
    assert orders("resubmit", "--state", "Error", "--since", "1h", "--dry-run") == 0
    captured = capsys.readouterr()
    assert "b-1" in captured.out and "would resubmit" in captured.out
    assert "b-3" not in captured.out
    assert "2 order(s) would be resubmitted, 0 refused; 1 more match that a resubmit would " \
        "refuse (compensation failed: --force" in " ".join(captured.err.split())
    assert "nothing was changed" in captured.err
    assert orders("resubmit", "--state", "Error", "--dry-run", "--force", "--json") == 0
    assert {i["OrderID"]: i["Outcome"] for i in json.loads(capsys.readouterr().out)["Items"]} == {
        "b-1": "would resubmit", "b-2": "would resubmit", "b-3": "would resubmit"}
    assert all(h.container.store.get_state(o).generation == 0 for o in ("b-1", "b-2", "b-3"))
    # A time in the future picks nothing.
    assert orders("resubmit", "--state", "Error", "--since", "2999-01-01T00:00Z",
                  "--dry-run", "--json") == 0
    assert json.loads(capsys.readouterr().out)["Items"] == []
    # For real, through the API as the signed-in operator, one batch of one.
    api = f"http://127.0.0.1:{h.port}/api"
    assert orders("--api", api, "resubmit", "--state", "Error", "--failed-step",
                  "charge_payment", "--limit", "1", "--reason", "outage over") == 0
    assert "more match" in capsys.readouterr().err
    done = [o for o in ("b-1", "b-2") if h.container.store.get_state(o).generation == 1]
    assert len(done) == 1
    assert h.container.store.get_state(done[0]).history[-1]["by"] == (
        "local developer (oid development)")
    # Straight to storage: the login name, as a single resubmit.
    assert orders("resubmit", "--state", "Error", "--failed-step", "charge_payment") == 0
    (other,) = {"b-1", "b-2"} - set(done)
    assert h.container.store.get_state(other).history[-1]["by"] == (
        f"{getpass.getuser()} (orders CLI, storage key: not an identity)")
    for args, says in [(["resubmit", "b-1", "--state", "Error"], "not both"),
                       (["resubmit"], "not both"),
                       (["resubmit", "b-1", "--dry-run"], "go with --state"),
                       (["resubmit", "--state", "Pending"], "only orders in Error"),
                       (["resubmit", "--state", "Error", "--since", "soon"], "--since")]:
        assert orders(*args) == 2, args
        assert says in capsys.readouterr().err, args


# -- JSON for scripts: send and watch (issue 33, item 4) --------------------------------------

def test_send_json_names_the_ids_sent_and_each_order_refused(
        env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One JSON object on stdout and nothing else there; an order too large for the channel
    is named with why, the others still go, and the exit code says one was not sent."""
    f = tmp_path / "orders.jsonl"
    f.write_text("\n".join(json.dumps(o) for o in (
        order("j-1"), {**order("j-big"), "note": "x" * 70_000}, order("j-3"))) + "\n")
    assert orders("send", "--local", "--file", str(f), "--json") == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["sent"] == ["j-1", "j-3"] and doc["queue"] == env["OrdersQueueName"]
    (refused,) = doc["failed"]
    assert refused["order_id"] == "j-big" and refused["position"] == 2
    assert "too large" in refused["error"] and doc["stopped"] is None
    assert "1 not sent" in captured.err
    # Samples: every id, and nothing refused.
    assert orders("send", "--local", "--count", "2", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["sent"]) == 2 and doc["failed"] == []
    # Without --json the refused order is a line on stderr, the sent ids on stdout as before.
    assert orders("send", "--local", "--file", str(f)) == 1
    captured = capsys.readouterr()
    assert captured.out.split() == ["j-1", "j-3"]
    assert "order j-big not sent: too large" in captured.err


def test_send_json_to_unreachable_storage_still_prints_the_json_and_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.settings import AZURITE_CONNECTION

    unreachable = AZURITE_CONNECTION.replace(":10001/", ":9/").replace(":10002/", ":9/")
    monkeypatch.setattr(sending, "LocalSender", _SendsThenFails)
    assert run([*NO_SETTINGS, "--storage", unreachable, "send", "--local", "--count", "3",
                "--json"]) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert len(doc["sent"]) == 1 and "unreachable" in doc["stopped"]
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: storage unreachable")


class _SendsThenFails:
    """A local channel whose storage goes away after the first order."""

    def __init__(self, *_: Any) -> None:
        self.sent = 0

    def send(self, items: Any) -> list[str]:
        from azure.core.exceptions import ServiceRequestError

        if self.sent:
            raise ServiceRequestError("HTTPConnectionPool(host='127.0.0.1', port=9): gone")
        self.sent += 1
        return [oid for oid, _ in items]

    def close(self) -> None:
        pass


def test_watch_json_says_each_order_and_keeps_the_exit_codes(
        run_host: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    h: RunningHost = run_host(only=set())
    failed_and_compensated(h, "w-failed")  # settled: Error, compensation done
    function("intake")(msg=sb_message(order("w-stuck"), message_id="w-stuck"))
    function("intake")(msg=sb_message(b"{oops", message_id="w-bad"))
    assert orders("watch", "w-failed", "w-stuck", "w-bad", "w-never", "--json",
                  "--timeout", "0.3", "--interval", "0.1") == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # only the JSON on stdout: no table
    by = {o["order_id"]: o for o in doc["orders"]}
    assert list(by) == ["w-failed", "w-stuck", "w-bad", "w-never"]
    assert by["w-failed"] | {"rejected": None} == {
        "order_id": "w-failed", "state": "Error", "settled": True, "compensation": "Done",
        "failures": by["w-failed"]["failures"], "last_error": by["w-failed"]["last_error"],
        "rejected": None}
    assert "card declined" in by["w-failed"]["last_error"]
    assert (by["w-stuck"]["state"], by["w-stuck"]["settled"]) == ("Processing", False)
    assert by["w-bad"]["state"] == "rejected" and by["w-bad"]["rejected"]["kind"] == "invalid"
    assert "JSON" in by["w-bad"]["rejected"]["reason"]
    assert by["w-never"] == {"order_id": "w-never", "state": "not received", "settled": False,
                             "compensation": None, "failures": None, "last_error": None,
                             "rejected": None}
    assert (doc["settled"], doc["rejected"], doc["not_settled"]) == (1, 1, 2)
    # No progress on stderr either (without --json its last state is a line there).
    assert captured.err.strip().splitlines() == [
        "error: 2 order(s) not settled after 0s; 1 message(s) rejected at intake (see the "
        "table, or `orders rejected`)"]
    # Rejected, all else settled: 1, as without --json; all settled: 0.
    # (--resend-wait 0: w-failed is settled at the first look; no resend is on its way.)
    assert orders("watch", "w-failed", "w-bad", "--json", "--interval", "0.1",
                  "--resend-wait", "0") == 1
    assert "1 message(s) rejected" in capsys.readouterr().err
    assert orders("watch", "w-failed", "--json", "--resend-wait", "0") == 0
    assert json.loads(capsys.readouterr().out)["settled"] == 1
    # `orders send --json | orders watch -`: it reads send's JSON as well as one id a line.
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(
        {"queue": "orders", "sent": ["w-failed"], "failed": [], "stopped": None})))
    assert orders("watch", "-", "--json", "--resend-wait", "0") == 0
    assert [o["order_id"] for o in json.loads(capsys.readouterr().out)["orders"]] == [
        "w-failed"]


# -- help that reads well at 80 columns (issue 33, item 4) --------------------------------------

def _help(cmd: list[str], columns: int, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert run([*cmd, "--help"]) == 0, cmd
    return capsys.readouterr().out.splitlines()


def _in_panel(line: str) -> bool:
    return line.startswith(("│", "╭", "╰"))


def _continues(line: str) -> bool:
    """A panel line that carries on the cell above (no option or command of its own)."""
    inner = line[1:-1]
    return len(inner) - len(inner.lstrip()) > 4 and bool(inner.strip())


@pytest.mark.parametrize("cmd", [[], *COMMANDS], ids=lambda c: " ".join(c) or "orders")
def test_help_has_no_line_broken_mid_paragraph(
        cmd: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Rich keeps a docstring's hard line breaks, so help wrapped at 100 columns in the source
    read at 80 as lines cut mid-sentence ("as you, with an" / "Entra ID access token").

    Two checks. On a terminal too wide to wrap anything, every line break is one the text
    itself holds: a paragraph (or an option's help) must then be one line, the only lines
    that carry on a cell being typer's own [default: ...] and [env var: ...]. At 80 columns:
    nothing is cut ("…"), no line is wider, and no line ends where the next line's first word
    would still have fitted (the mark of a break the text made, not the terminal)."""
    wide = _help(cmd, 2000, monkeypatch, capsys)
    for i, line in enumerate(wide[1:], 1):
        prev = wide[i - 1]
        if _in_panel(line):
            if _continues(line):
                assert line[1:-1].strip().startswith("["), (cmd, prev, line)
        elif line.strip() and prev.strip() and not _in_panel(prev):
            raise AssertionError(f"{cmd}: a paragraph broken by the text itself: "
                                 f"{prev.strip()!r} / {line.strip()!r}")
    narrow = _help(cmd, 80, monkeypatch, capsys)
    assert all(len(line) <= 80 and "…" not in line for line in narrow), cmd
    # Nothing in it depends on where the clone lies (a default shown as its absolute path was
    # cut at 80 columns in a clone of a long path).
    assert str(ROOT) not in "".join(wide), cmd
    for prev, line in itertools.pairwise(narrow):
        if _in_panel(line) != _in_panel(prev) or not line.strip(" │") or not prev.strip(" │"):
            continue
        if _in_panel(line):
            if not _continues(line) or line[1:-1].strip().startswith("["):
                continue
            text, room = prev[:-1].rstrip(), 78  # the cell ends a space before the border
        else:
            text, room = prev.rstrip(), 79  # the page's own padding: one space each side
        word = line.strip(" │").split()[0]
        assert len(text) + 1 + len(word) > room, (
            f"{cmd}: {text.strip()!r} ends though {word!r} would fit after it")


# -- a conflicting resend (issue 33: watch said Processed, exit 0) ------------------------------

def test_watch_says_a_conflicting_resend_and_exits_1(
        run_host: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same id sent again with a different body: intake keeps the first order and refuses
    the second. Watching it must say so, not report the first order's state with exit 0,
    whether intake refused it before the watch began or while it waits."""
    h: RunningHost = run_host(only={"intake"})
    failed_and_compensated(h, "c-1")  # settled: what the first order came to
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(order("c-1", customer_id="c-2")) + "\n")
    # Sent, then watched at once: intake (the host's) has not read it yet at the first look.
    assert orders("send", "--local", "--file", str(other)) == 0
    capsys.readouterr()
    assert orders("watch", "c-1", "--timeout", "30", "--interval", "0.1") == 1
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()[-1:]
    assert line == ("error: 1 order(s) sent again with different content: refused, the first "
                    "one kept (see the table, or `orders rejected`)")
    assert "conflict" in captured.out
    # Refused before the watch began, and as JSON.
    assert orders("watch", "c-1", "--json") == 1
    (doc,) = json.loads(capsys.readouterr().out)["orders"]
    assert (doc["state"], doc["settled"], doc["rejected"]["kind"]) == ("conflict", False,
                                                                     "conflict")
    assert "c-1 already exists with different content" in doc["rejected"]["reason"]
    assert doc["last_error"] == h.container.store.get_state("c-1").last_error  # the stored one


def test_watch_of_a_resend_with_the_same_content_is_its_state(
        run_host: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h: RunningHost = run_host(only={"intake"})
    failed_and_compensated(h, "c-2")
    same = tmp_path / "same.jsonl"
    same.write_text(json.dumps(order("c-2")) + "\n")
    assert orders("send", "--local", "--file", str(same)) == 0
    capsys.readouterr()
    assert orders("watch", "c-2", "--interval", "0.1", "--resend-wait", "1") == 0
    assert "Error" in capsys.readouterr().out


def test_send_tells_a_message_the_channel_refuses_from_a_channel_that_failed() -> None:
    """Too large: that order is skipped and the others go; anything else stops the send."""
    from azure.core.exceptions import HttpResponseError, ServiceRequestError
    from azure.servicebus.exceptions import (
        MessageSizeExceededError,
        ServiceBusConnectionError,
    )

    too_big = HttpResponseError(message="too big")
    too_big.status_code = 413
    assert "too large for Service Bus" in (
        sending._refused_message(MessageSizeExceededError(message="1 MB")) or "")
    assert "too large for the local channel" in (sending._refused_message(too_big) or "")
    for stop in (ServiceBusConnectionError(message="no route"), ServiceRequestError("down"),
                 HttpResponseError(message="forbidden")):
        assert sending._refused_message(stop) is None, stop


def test_text_from_outside_is_printed_as_it_is_never_read_as_markup(
        run_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The red team's R3: a message id is the sender's to choose, an error text a service's:
    read as Rich markup, "[hidden]" vanished from the table and "[/]" raised out of the CLI."""
    run_host(only=set())
    intake = function("intake")
    for mid in ("ord-7[hidden]", "[/]", "[bold red]x", "tenant:a:42"):
        intake(msg=sb_message(b"{oops", message_id=mid))
    assert orders("rejected", "--limit", "10") == 0
    shown = capsys.readouterr().out
    assert "ord-7[hidden]" in shown and "[/]" in shown and "[bold red]x" in shown
    assert "tenant:a:42" in shown  # not an emoji code: it printed "tenant🅰42"


def test_watch_follows_a_corrected_resend_of_an_id_rejected_before(
        run_host: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The red team's R6: an id intake had rejected (its body was wrong) and sent again,
    corrected, was reported rejected at once, from the earlier message's row, before intake
    had read the new one; exit 1 for an order that was then taken and processed."""
    run_host(only={"intake", "scheduler_commands", "scheduler_replies", "inventory_agent",
                   "payment_agent", "shipping_agent", "simulated_service", "simulated_provider"})
    intake = function("intake")
    intake(msg=sb_message(b"{oops", message_id="w-1"))
    looked = threading.Event()
    real = Operator.rejection

    def rejection(self: Operator, order_id: str) -> dict[str, Any] | None:
        found = real(self, order_id)
        looked.set()  # the watch has seen the earlier message's rejection
        return found

    monkeypatch.setattr(Operator, "rejection", rejection)
    resend = threading.Thread(target=lambda: looked.wait(30) and intake(
        msg=sb_message(order("w-1"), message_id="w-1-again")))
    resend.start()
    assert orders("watch", "w-1", "--json", "--timeout", "60", "--interval", "0.1",
                  "--resend-wait", "30") == 0
    resend.join()
    (watched,) = json.loads(capsys.readouterr().out)["orders"]
    assert (watched["state"], watched["rejected"]) == ("Processed", None)
    # An id rejected and not sent again is still reported, once the wait is over.
    intake(msg=sb_message(b"{oops", message_id="w-2"))
    assert orders("watch", "w-2", "--json", "--timeout", "10", "--interval", "0.1",
                  "--resend-wait", "0.5") == 1
    (watched,) = json.loads(capsys.readouterr().out)["orders"]
    assert watched["rejected"]["kind"] == "invalid"
    # ... and when the watch's time is up before the wait is (review finding 7)
    assert orders("watch", "w-2", "--json", "--timeout", "0.3", "--interval", "0.1",
                  "--resend-wait", "30") == 1
    said = json.loads(capsys.readouterr().out)
    assert said["orders"][0]["rejected"]["kind"] == "invalid" and said["not_settled"] == 0


# What a terminal acts on (clear the screen, a clipboard write, a link, a colour, reversed or
# hidden text, a fake line), as a service's error, a result's value and a message id carry it.
HOSTILE = ("\x1b[2J\x1b]52;c;aGk=\x07\x1b]8;;http://x\x1b\\\x9b31m\u202eevil\u2028fake\u200b"
           "\u061c\u180e\ufff9\U000e0041\u00ad\u206a")
# Raw in what the CLI printed: any of them (the line ends Rich writes aside).
ACTING = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                    "\u2060-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")


def test_text_from_outside_reaches_the_terminal_inert(
        run_host: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.integration.test_operator_api import accept, requests_of
    from tests.integration.test_scheduler import reply

    monkeypatch.setenv("COLUMNS", "2000")  # each text on one line, to be found whole

    h: RunningHost = run_host(only=set())
    s = h.container.scheduler
    s.handle_command(accept("t-1"))
    (req,) = requests_of(h, 0)
    s.handle_reply(reply(req, result={"id": HOSTILE}))
    (refused,) = requests_of(h, 1)
    s.handle_reply(reply(refused, "permanent_error", f"HTTP 422 {HOSTILE}"))
    function("intake")(msg=sb_message(b"{oops", message_id=f"m{HOSTILE}"))
    for args in (["status", "t-1"], ["trace", "t-1"], ["list"], ["alerts"], ["rejected"],
                 ["watch", "t-1", "--timeout", "0.2", "--interval", "0.1"]):
        orders(*args)
        said = capsys.readouterr()
        text = said.out + said.err
        assert not ACTING.search(text), (args, text)
        assert "\\x1b[2J" in text and "\\u202eevil" in text, (args, text)  # shown, escaped
    # --json is JSON: the text whole, each of them escaped by JSON itself.
    assert orders("status", "t-1", "--json") == 0
    out = capsys.readouterr().out
    assert not ACTING.search(out.replace("\n", ""))
    assert HOSTILE in json.loads(out)["LastError"]


def test_the_token_goes_over_plain_http_only_to_this_machine(
        env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    for url in ("http://orders.example/api", "http://10.0.0.5:7071/api", "ftp://x"):
        assert orders("--api", url, "--token", "t0ken", "health") == 2, url
        said = capsys.readouterr().err
        assert "give an https URL" in said and "t0ken" not in said, said
    # To this machine it goes (and says what it found there: nothing listening).
    assert orders("--api", "http://127.0.0.1:9/api", "--token", "t0ken", "health") == 2
    said = capsys.readouterr().err
    assert "cannot reach the operator API" in said and "nothing answers there" in said, said
    assert "Errno" not in said, said  # words, not the socket's number


def test_list_fits_80_columns_without_cutting_a_state(
        run_host: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    h: RunningHost = run_host(only=set())
    failed_and_compensated(h, "a-rather-long-order-id-0001")
    from tests.integration.test_operator_api import accept

    h.container.scheduler.handle_command(accept("a-rather-long-order-id-0002"))
    monkeypatch.setenv("COLUMNS", "80")
    assert orders("list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    text = "\n".join(lines)
    assert "Processing" in text and "Error/" in text and "…" not in text, text
    # Too wide for a table: each order's id, state and time on a line, whole, not folded a
    # few letters a line; its workflow, step and last error indented below it.
    head = next(line for line in lines if line.startswith("a-rather-long-order-id-0001 "))
    assert re.fullmatch(r"a-rather-long-order-id-0001  Error/\w+  \d{4}-\d\d-\d\dT[\d:]{8}",
                        head), head
    below = lines[lines.index(head) + 1]
    assert below.startswith("  order-fulfilment v1") and "card declined" in below, text
    # Wide enough: one table, a row an order, under its headers.
    monkeypatch.setenv("COLUMNS", "250")
    assert orders("list") == 0
    wide = capsys.readouterr().out.splitlines()
    assert wide[0].split()[:3] == ["order", "state", "workflow"] and "last error" in wide[0]
    assert len(wide) == 3 and any(line.startswith("a-rather-long-order-id-0002 ") for line in wide)
