"""The local host drives the functions the way the Functions host would."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import azure.functions as func
import pytest
import requests
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables import TableServiceClient
from azure.storage.queue import QueueServiceClient, TextBase64EncodePolicy

from localrun.azurite import free_port
from localrun.host import polling
from localrun.host.config import HostConfigError, QueueOptions
from localrun.host.host import LocalFunctionHost
from localrun.host.polling import receiver
from localrun.metering import StorageMeter, all_metered, per_order_counts
from localrun.servicebus import LocalServiceBusChannel
from shared.domain.due_index import key_for
from shared.settings import AZURITE_CONNECTION
from tests.conftest import ROOT, wait_until
from tests.integration.conftest import RunningHost
from tests.integration.helpers import entities, order

FAST_RETRIES = {"version": "2.0", "extensions": {"queues": {
    "maxPollingInterval": "00:00:00.1", "visibilityTimeout": "00:00:00", "batchSize": 4,
    "newBatchThreshold": 2, "maxDequeueCount": 3, "messageEncoding": "base64"}}}


def test_host_json_queue_settings_are_read() -> None:
    opts = QueueOptions.from_host_json(json.loads((ROOT / "host.json").read_text()))
    assert (opts.max_dequeue_count, opts.visibility_timeout, opts.batch_size) == (5, 10.0, 16)
    assert opts.base64


def test_failing_queue_message_goes_to_poison_after_max_dequeue_count(
        app_env: Any) -> None:
    import function_app

    env = app_env()
    host = LocalFunctionHost(function_app.app, settings=env,
                             storage_connection=env["AzureWebJobsStorage"],
                             host_json=FAST_RETRIES, only={"scheduler_commands"})
    qs = QueueServiceClient.from_connection_string(env["AzureWebJobsStorage"])
    qs.get_queue_client(env["SchedulerQueueName"],
                        message_encode_policy=TextBase64EncodePolicy()).send_message("not json")
    poison = qs.get_queue_client(env["SchedulerQueueName"] + "-poison")
    with host:
        wait_until(lambda: host.stats.poisoned == 1, timeout=20, message="poison")
    assert host.stats.failures["scheduler_commands"] == 3
    (m,) = poison.receive_messages()
    assert m.content == host_b64("not json")


def test_a_poll_is_one_request_for_at_most_the_batch(app_env: Any) -> None:
    # The host's listener makes one Get Messages request per poll; a short batch is not
    # followed by another request (the SDK's pager, asked for n messages, would ask again).
    env = app_env()
    meter = StorageMeter()
    queue = QueueServiceClient.from_connection_string(
        env["AzureWebJobsStorage"], **meter.queue_options).get_queue_client(
        env["SchedulerQueueName"])
    for i in range(3):
        queue.send_message(f"m{i}")
    meter.reset()
    receive = receiver(queue, 30)
    assert len(receive(2)) == 2
    assert len(receive(4)) == 1
    assert receive(4) == []
    assert meter.snapshot()["requests"] == {"queue.receive": 2, "queue.receive.empty": 1}


def test_the_service_bus_stand_in_is_not_counted_as_storage(app_env: Any) -> None:
    """Its queue is a Storage queue in Azurite, but in Azure these are Service Bus operations:
    the meter keeps them apart, and an order's storage transactions leave them out."""
    env = app_env(OrdersQueueName=f"{uuid.uuid4().hex}.a-name-long-enough-to-be-cut.for.storage")
    meter = StorageMeter()
    service = QueueServiceClient.from_connection_string(env["AzureWebJobsStorage"],
                                                        **meter.queue_options)
    channel = LocalServiceBusChannel(service, env["OrdersQueueName"])
    channel.ensure()
    meter.reset()
    channel.send(b"{}")
    (m,) = receiver(channel.queue, 30)(1)
    channel.queue.delete_message(m)
    channel.deadletter.send_message("x")
    service.get_queue_client(env["SchedulerQueueName"]).send_message("m")
    assert meter.snapshot()["requests"] == {
        "local_service_bus.send": 2, "local_service_bus.receive": 1,
        "local_service_bus.delete": 1, "queue.send": 1}
    counts = per_order_counts(1, meter.per_function())
    assert counts["transactions"] == counts["queue_transactions"] == counts["queue_sends"] == 1
    assert counts["local_service_bus"] == {"send": 2, "receive": 1, "delete": 1}


def host_b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def test_service_bus_trigger_gets_real_messages_and_dead_letters(
        run_host: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import function_app

    h: RunningHost = run_host(only={"simulated_service"})
    seen: list[tuple[str, int, bytes]] = []

    def failing(message_id: str, body: bytes, delivery_count: int = 1,
                sent_at: datetime | None = None, traceparent: str | None = None,
                sender: object = None) -> None:
        assert sent_at is not None and sent_at.tzinfo is not None  # the enqueued time, in UTC
        seen.append((message_id, delivery_count, body))
        raise RuntimeError("storage is down")

    monkeypatch.setattr(h.container.intake, "handle", failing)
    host = LocalFunctionHost(function_app.app, settings=h.env,
                             storage_connection=h.env["AzureWebJobsStorage"],
                             host_json=ROOT / "host.json", poll_interval=0.1,
                             max_delivery_count=3, only={"intake"})
    channel = LocalServiceBusChannel(h.container.queues, h.env["OrdersQueueName"])
    channel.ensure()
    channel.send(json.dumps(order("o-1")), message_id="o-1")
    with host:
        wait_until(lambda: host.stats.dead_lettered == 1, timeout=20, message="dead letter")
    assert [(mid, n) for mid, n, _ in seen] == [("o-1", 1), ("o-1", 2), ("o-1", 3)]
    assert json.loads(seen[0][2])["order_id"] == "o-1"
    (dead,) = channel.dead_lettered()
    assert dead["message_id"] == "o-1"
    assert dead["dead_letter_reason"] == "MaxDeliveryCountExceeded"


def test_service_bus_message_reaches_intake_and_is_stored(run_host: Any) -> None:
    h: RunningHost = run_host(only={"intake"})
    channel = LocalServiceBusChannel(h.container.queues, h.env["OrdersQueueName"])
    # The queue exists before anyone sends, as the Bicep makes it in Azure: the host's
    # listener, which also creates it, starts on a thread of its own.
    channel.ensure()
    channel.send(json.dumps(order("o-7")), message_id="o-7")
    wait_until(lambda: entities(h.env["StateTableName"], "PartitionKey eq 'o-7'"),
               timeout=20, message="order stored")
    # Counted when the invocation returns, a moment after it stored the order.
    wait_until(lambda: h.host.stats.invocations.get("intake", 0) >= 1, timeout=10,
               message="the invocation counted")
    assert h.host.stats.invocations["intake"] == 1


def test_timer_fires_on_its_ncrontab_schedule(run_host: Any) -> None:
    h: RunningHost = run_host(only={"supervisor"}, SupervisorSchedule="*/1 * * * * *")
    wait_until(lambda: h.host.stats.invocations.get("supervisor", 0) >= 2, timeout=10,
               message="two supervisor ticks")


def test_unresolved_setting_is_an_error_naming_it() -> None:
    import function_app

    host = LocalFunctionHost(function_app.app, settings={},
                             storage_connection=AZURITE_CONNECTION, host_json=FAST_RETRIES)
    with pytest.raises(HostConfigError, match="SchedulerQueueName"):
        host.resolve("%SchedulerQueueName%")
    # At start-up, every one that does not resolve, at once, and where to put them.
    with pytest.raises(HostConfigError) as e:
        host.start()
    for name in ("%OrdersQueueName%", "%SchedulerQueueName%", "%AgentResponsesQueueName%",
                 "%PaymentRequestsQueueName%"):
        assert name in str(e.value)
    assert "local.settings.json" in str(e.value)


def test_queue_output_binding_is_sent_after_the_function_returns(app_env: Any) -> None:
    env = app_env()
    app = func.FunctionApp()

    @app.function_name("echo")
    @app.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                       connection="AzureWebJobsStorage")
    @app.queue_output(arg_name="out", queue_name="%AgentResponsesQueueName%",
                      connection="AzureWebJobsStorage")
    def echo(msg: func.QueueMessage, out: func.Out[str]) -> None:
        out.set(msg.get_body().decode().upper())

    qs = QueueServiceClient.from_connection_string(env["AzureWebJobsStorage"])
    qs.get_queue_client(env["SchedulerQueueName"],
                        message_encode_policy=TextBase64EncodePolicy()).send_message("hello")
    out = qs.get_queue_client(env["AgentResponsesQueueName"])
    with LocalFunctionHost(app, settings=env, storage_connection=env["AzureWebJobsStorage"],
                           host_json=FAST_RETRIES):
        msgs = wait_until(lambda: list(out.peek_messages()), timeout=10, message="output")
    assert [m.content for m in msgs] == [host_b64("HELLO")]  # type: ignore[attr-defined]



def test_an_output_binding_creates_its_queue_and_a_failed_send_fails_the_invocation(
        app_env: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    # A queue nobody created (the host's binding creates it), and a name Storage refuses.
    env = app_env(NewQueueName=f"made-by-binding-{tag}", BadQueueName=f"Not_A_Queue_{tag}")
    app = func.FunctionApp()

    @app.function_name("fresh")
    @app.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                       connection="AzureWebJobsStorage")
    @app.queue_output(arg_name="out", queue_name="%NewQueueName%",
                      connection="AzureWebJobsStorage")
    def fresh(msg: func.QueueMessage, out: func.Out[str]) -> None:
        out.set(msg.get_body().decode())

    @app.function_name("refused")
    @app.queue_trigger(arg_name="msg", queue_name="%AgentResponsesQueueName%",
                       connection="AzureWebJobsStorage")
    @app.queue_output(arg_name="out", queue_name="%BadQueueName%",
                      connection="AzureWebJobsStorage")
    def refused(msg: func.QueueMessage, out: func.Out[str]) -> None:
        out.set("never arrives")

    qs = QueueServiceClient.from_connection_string(env["AzureWebJobsStorage"])
    for name in ("SchedulerQueueName", "AgentResponsesQueueName"):
        q = qs.get_queue_client(env[name], message_encode_policy=TextBase64EncodePolicy())
        with contextlib.suppress(ResourceExistsError):
            q.create_queue()
        q.send_message("hello")
    made = qs.get_queue_client(env["NewQueueName"])

    def arrived() -> list[Any]:
        try:
            return list(made.peek_messages())
        except ResourceNotFoundError:  # not yet created
            return []

    with LocalFunctionHost(app, settings=env, storage_connection=env["AzureWebJobsStorage"],
                           host_json=FAST_RETRIES) as host:
        msgs = wait_until(arrived, timeout=10, message="output")
        wait_until(lambda: host.stats.poisoned == 1, timeout=20, message="the refused one")
    assert [m.content for m in msgs] == [host_b64("hello")]  # type: ignore[attr-defined]
    # Each of its three runs returned, and each failed when its output could not be sent.
    assert host.stats.invocations["refused"] == 3 and host.stats.failures == {"refused": 3}


def test_an_output_binding_wakes_the_listener_on_its_queue_as_the_shared_watcher_does(
        app_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every wait after an empty poll 30 s long: a message taken within seconds of the send was
    # taken because the output binding's send woke the listener on its queue.
    monkeypatch.setattr(polling, "MIN_POLLING_INTERVAL", 30.0)
    env = app_env()
    app = func.FunctionApp()
    taken = threading.Event()

    @app.function_name("kick")
    @app.route(route="kick", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
    @app.queue_output(arg_name="out", queue_name="%AgentResponsesQueueName%",
                      connection="AzureWebJobsStorage")
    def kick(req: func.HttpRequest, out: func.Out[str]) -> func.HttpResponse:
        out.set("go")
        return func.HttpResponse(status_code=202)

    @app.function_name("woken")
    @app.queue_trigger(arg_name="msg", queue_name="%AgentResponsesQueueName%",
                       connection="AzureWebJobsStorage")
    def woken(msg: func.QueueMessage) -> None:
        taken.set()

    meter = StorageMeter()
    host = LocalFunctionHost(app, settings=env, storage_connection=env["AzureWebJobsStorage"],
                             host_json=ROOT / "host.json", http_port=free_port(),
                             poll_interval=60.0, queue_options=meter.queue_options)
    with host:
        wait_until(lambda: meter.count("queue", "receive.empty") >= 1, timeout=10,
                   message="the listener's first empty poll: it now waits 30 s")
        r = requests.post(f"http://127.0.0.1:{host.http_port}/api/kick", timeout=10)
        assert r.status_code == 202
        wait_until(taken.is_set, timeout=10, message="the message taken at once")
    assert host.stats.invocations == {"kick": 1, "woken": 1}


def test_the_host_is_idle_only_once_each_message_is_settled(
        app_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the demo and the bench wait for before they read the meter (all_metered): not idle
    while a function runs, nor while the host settles its message after it returned."""
    env = app_env()
    app = func.FunctionApp()
    running, finish = threading.Event(), threading.Event()

    @app.function_name("slow")
    @app.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                       connection="AzureWebJobsStorage")
    def slow(msg: func.QueueMessage) -> None:
        running.set()
        finish.wait(10)

    host = LocalFunctionHost(app, settings=env, storage_connection=env["AzureWebJobsStorage"],
                             host_json=FAST_RETRIES)
    settling, settle = threading.Event(), threading.Event()
    real_settle = host._settle

    def held_settle(held: Any, visible_after: float | None) -> None:
        settling.set()
        settle.wait(10)
        real_settle(held, visible_after)

    monkeypatch.setattr(host, "_settle", held_settle)
    queue = QueueServiceClient.from_connection_string(env["AzureWebJobsStorage"]) \
        .get_queue_client(env["SchedulerQueueName"], message_encode_policy=TextBase64EncodePolicy())
    queue.send_message("work")
    with host:
        wait_until(running.is_set, timeout=10, message="the function to start")
        assert not host.idle
        finish.set()
        wait_until(settling.is_set, timeout=10, message="the host to settle the message")
        assert host.stats.invocations == {"slow": 1}  # returned, and the host still busy
        assert not host.idle
        settle.set()
        wait_until(lambda: host.idle, timeout=10, message="the host idle")
        assert queue.get_queue_properties().approximate_message_count == 0


def test_the_meter_waits_for_the_index_entries_that_settled_records_name(app_env: Any) -> None:
    env = app_env()
    inflight = TableServiceClient.from_connection_string(env["AzureWebJobsStorage"]) \
        .get_table_client(env["InFlightTableName"])
    named, stale = (key_for(order_id, 1, datetime.now(UTC)) for order_id in ("o-1", "o-0"))
    for k in (named, stale):
        inflight.create_entity({"PartitionKey": k.partition, "RowKey": k.row})
    states = [{"OrderID": "o-1", "IndexKey": str(named)}, {"OrderID": "o-2", "IndexKey": None}]
    idle, busy = SimpleNamespace(idle=True), SimpleNamespace(idle=False)
    assert not all_metered(states, inflight, idle)  # type: ignore[arg-type]
    inflight.delete_entity(named.partition, named.row)
    # An entry no record names any more is the Supervisor's to drop, not this work's.
    assert all_metered(states, inflight, idle)  # type: ignore[arg-type]
    assert not all_metered(states, inflight, busy)  # type: ignore[arg-type]


def test_a_binding_setting_missing_at_start_stops_the_host(app_env: Any) -> None:
    import function_app

    env = app_env()
    del env["OrdersQueueName"]
    host = LocalFunctionHost(function_app.app, settings=env,
                             storage_connection=env["AzureWebJobsStorage"],
                             host_json=FAST_RETRIES)
    with pytest.raises(HostConfigError, match="OrdersQueueName"):
        host.start()
    host.stop()


def test_a_value_returned_without_a_return_binding_fails_the_invocation(app_env: Any) -> None:
    env = app_env()
    app = func.FunctionApp()

    @app.function_name("returns")
    @app.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                       connection="AzureWebJobsStorage")
    def returns(msg: func.QueueMessage) -> str:
        return "nowhere to go"

    host = LocalFunctionHost(app, settings=env, storage_connection=env["AzureWebJobsStorage"],
                             host_json=FAST_RETRIES)
    (f,) = host._functions
    with pytest.raises(TypeError, match="no return binding"):
        host.call(f, func.QueueMessage(body=b"x"))
    assert host.stats.failures["returns"] == 1


def test_the_timer_gets_its_schedule_status(app_env: Any) -> None:
    seen: list[Any] = []
    app = func.FunctionApp()

    @app.function_name("ticking")
    @app.timer_trigger(arg_name="timer", schedule="%TickSchedule%", use_monitor=True)
    def ticking(timer: func.TimerRequest) -> None:
        seen.append(timer.schedule_status)

    env = {**app_env(), "TickSchedule": "*/1 * * * * *"}
    with LocalFunctionHost(app, settings=env, storage_connection=env["AzureWebJobsStorage"],
                           host_json={"version": "2.0"}):
        wait_until(lambda: len(seen) >= 2, timeout=10, message="two ticks")
    status = seen[-1]
    assert set(status) == {"Last", "Next", "LastUpdated"}
    assert status["Last"] is not None and status["Next"] > status["Last"]


def _host_cli(env: dict[str, str], *args: str) -> Any:
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if k not in env and "Azure" not in k}
    return subprocess.run([sys.executable, "-m", "localrun", "host", "--settings", "/nonexistent",
                           *args], env={**clean, **env}, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_the_host_reports_bad_settings_in_one_line() -> None:
    r = _host_cli({"PATH": os.environ["PATH"]})
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("error: "), r.stderr
    assert "AzureWebJobsStorage" in r.stderr


def test_the_host_reports_a_busy_port_in_one_line(app_env: Any) -> None:
    import socket

    env = app_env()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = _host_cli(env, "--port", str(port))
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().count("\n") == 0 and f"port {port}" in r.stderr, r.stderr
