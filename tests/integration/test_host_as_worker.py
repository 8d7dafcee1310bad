"""The local host hands functions what the Functions host and the Python worker would.

Each test pins one difference the local host used to have: trigger values built by the library's
converters from host-shaped data, one shared thread pool, leases renewed while a function runs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import azure.functions as func
import pytest
import requests
from azure.storage.queue import QueueServiceClient, TextBase64EncodePolicy

from localrun.azurite import free_port
from localrun.host.config import HOST_DEFAULT_THREAD_COUNT, HostConfigError
from localrun.host.host import LocalFunctionHost
from localrun.servicebus import LocalServiceBusChannel
from tests.conftest import wait_until

HOST_JSON = {"version": "2.0", "extensions": {
    "queues": {"maxPollingInterval": "00:00:00.1", "visibilityTimeout": "00:00:00",
               "batchSize": 4, "newBatchThreshold": 2, "maxDequeueCount": 3,
               "messageEncoding": "base64"},
    "serviceBus": {"maxConcurrentCalls": 4, "maxAutoLockRenewalDuration": "00:05:00"}}}


def _queue(env: dict[str, str], name: str) -> Any:
    qs = QueueServiceClient.from_connection_string(env["AzureWebJobsStorage"])
    q = qs.get_queue_client(env[name], message_encode_policy=TextBase64EncodePolicy())
    return q


def _host(app: func.FunctionApp, env: dict[str, str], **kw: Any) -> LocalFunctionHost:
    return LocalFunctionHost(app, settings=env, storage_connection=env["AzureWebJobsStorage"],
                             host_json=kw.pop("host_json", HOST_JSON), **kw)


def test_a_service_bus_message_is_what_the_worker_builds(app_env: Any) -> None:
    env = app_env()
    app = func.FunctionApp()
    seen: list[func.ServiceBusMessage] = []

    @app.function_name("sb")
    @app.service_bus_queue_trigger(arg_name="msg", queue_name="%OrdersQueueName%",
                                   connection="ServiceBusConnection")
    def sb(msg: func.ServiceBusMessage) -> None:
        seen.append(msg)

    host = _host(app, env)
    channel = LocalServiceBusChannel(host._queues, env["OrdersQueueName"])
    channel.ensure()
    channel.send(b'{"order_id": "o-1", "note": "caf\xe9"}', message_id="m-1",
                 application_properties={"source": "test"})
    with host:
        wait_until(lambda: seen, timeout=30, message="the message")
    (m,) = seen
    # The host passes the body as text: bytes that are not UTF-8 arrive replaced.
    assert m.get_body() == '{"order_id": "o-1", "note": "caf\ufffd"}'.encode()
    assert isinstance(m.metadata, dict) and m.metadata["MessageId"] == "m-1"
    assert m.metadata["DeliveryCount"] == 1
    # The extension sends its times without an offset: naive, as the worker returns them.
    assert isinstance(m.enqueued_time_utc, datetime) and m.enqueued_time_utc.tzinfo is None
    assert m.expires_at_utc is not None and m.expires_at_utc.tzinfo is None
    assert isinstance(m.sequence_number, int)
    assert (m.message_id, m.delivery_count, m.content_type) == ("m-1", 1, "application/json")
    assert m.application_properties == {"source": "test"}


def test_a_queue_message_is_what_the_worker_builds(app_env: Any) -> None:
    env = app_env()
    app = func.FunctionApp()
    seen: list[func.QueueMessage] = []

    @app.function_name("q")
    @app.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                       connection="AzureWebJobsStorage")
    def q(msg: func.QueueMessage) -> None:
        seen.append(msg)

    queue = _queue(env, "SchedulerQueueName")
    queue.send_message("hello")
    with _host(app, env):
        wait_until(lambda: seen, timeout=30, message="the message")
    (m,) = seen
    assert m.get_body() == b"hello" and m.dequeue_count == 1
    # Storage queue times are DateTimeOffsets: aware.
    assert m.insertion_time is not None and m.insertion_time.tzinfo is not None
    assert m.expiration_time is not None and m.pop_receipt


def _blocking_app(release: threading.Event, started: Callable[[], None]) -> func.FunctionApp:
    app = func.FunctionApp()

    @app.function_name("slow")
    @app.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                       connection="AzureWebJobsStorage")
    def slow(msg: func.QueueMessage) -> None:
        started()
        release.wait(30)

    @app.function_name("ping")
    @app.route(route="ping", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def ping(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse("pong")

    return app


def test_every_function_shares_one_thread_pool(app_env: Any) -> None:
    """Two threads, both taken by queue invocations: the HTTP function waits for one of them."""
    env = app_env(PYTHON_THREADPOOL_THREAD_COUNT="2")
    release, running = threading.Event(), threading.Semaphore(0)
    host = _host(_blocking_app(release, running.release), env, http_port=free_port())
    queue = _queue(env, "SchedulerQueueName")
    for _ in range(2):
        queue.send_message("block")
    answered = threading.Event()
    with host:
        for _ in range(2):
            assert running.acquire(timeout=10), "both queue invocations should start"

        def call() -> None:
            r = requests.get(f"http://127.0.0.1:{host.http_port}/api/ping", timeout=30)
            if r.text == "pong":
                answered.set()

        caller = threading.Thread(target=call)
        caller.start()
        assert not answered.wait(1.0), "answered while every worker thread was taken"
        release.set()
        assert answered.wait(10), "answered once a worker thread was free"
        caller.join()


def test_the_thread_count_is_the_setting_or_the_hosts_default(app_env: Any) -> None:
    app = func.FunctionApp()
    assert _host(app, app_env()).thread_count == HOST_DEFAULT_THREAD_COUNT == 1000
    assert _host(app, app_env(PYTHON_THREADPOOL_THREAD_COUNT="64")).thread_count == 64
    with pytest.raises(HostConfigError, match="PYTHON_THREADPOOL_THREAD_COUNT"):
        _host(app, app_env(PYTHON_THREADPOOL_THREAD_COUNT="many"))


def test_a_long_invocation_keeps_its_message_by_renewing_the_lease(app_env: Any) -> None:
    """A 2 s lease and a 5 s invocation: without renewal the message would run twice."""
    env = app_env()
    app = func.FunctionApp()
    calls: list[str] = []

    @app.function_name("long")
    @app.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                       connection="AzureWebJobsStorage")
    def long(msg: func.QueueMessage) -> None:
        calls.append(msg.id)
        threading.Event().wait(5)  # the slow work itself, not a synchronisation

    queue = _queue(env, "SchedulerQueueName")
    queue.send_message("work")
    host = _host(app, env, lease_seconds=2)
    with host:
        wait_until(lambda: host.stats.invocations.get("long") == 1, timeout=15,
                   message="the invocation to finish")
        assert not list(queue.peek_messages()), "the message is deleted once it succeeds"
    assert len(calls) == 1


def test_a_service_bus_lock_is_renewed_only_up_to_max_auto_lock_renewal(app_env: Any) -> None:
    """Past maxAutoLockRenewalDuration the lock lapses and Service Bus delivers again."""
    env = app_env()
    app = func.FunctionApp()
    deliveries: list[tuple[int, float]] = []
    release = threading.Event()

    @app.function_name("sb")
    @app.service_bus_queue_trigger(arg_name="msg", queue_name="%OrdersQueueName%",
                                   connection="ServiceBusConnection")
    def sb(msg: func.ServiceBusMessage) -> None:
        deliveries.append((msg.delivery_count or 0, time.monotonic()))
        release.wait(30)

    short = json.loads(json.dumps(HOST_JSON))
    short["extensions"]["serviceBus"]["maxAutoLockRenewalDuration"] = "00:00:03"
    host = _host(app, env, host_json=short, lock_seconds=2)
    channel = LocalServiceBusChannel(host._queues, env["OrdersQueueName"])
    channel.ensure()
    channel.send(b"{}", message_id="m-1")
    with host:
        try:
            wait_until(lambda: len(deliveries) >= 2, timeout=15, message="a second delivery")
        finally:
            release.set()
    (first, t1), (second, t2) = deliveries[:2]
    assert (first, second) == (1, 2)
    # The 2 s lock was renewed while the function ran (else the second delivery comes at 2 s)
    # and given up after the 3 s renewal window.
    assert t2 - t1 >= 3.0


def test_each_function_is_charged_the_cpu_of_its_own_invocations(app_env: Any) -> None:
    """The bench splits the process's CPU by function: a function that computes is charged its
    seconds, one that waits is not, and neither is charged the other's."""
    app = func.FunctionApp()

    def spin(seconds: float) -> None:
        t0 = time.thread_time()
        while time.thread_time() - t0 < seconds:
            pass

    @app.function_name("computes")
    @app.route(route="computes", auth_level=func.AuthLevel.ANONYMOUS)
    def computes(req: func.HttpRequest) -> func.HttpResponse:
        spin(0.2)
        return func.HttpResponse("done")

    @app.function_name("waits")
    @app.route(route="waits", auth_level=func.AuthLevel.ANONYMOUS)
    def waits(req: func.HttpRequest) -> func.HttpResponse:
        time.sleep(0.2)
        return func.HttpResponse("done")

    with _host(app, app_env(), http_port=free_port()) as host:
        for route in ("computes", "waits", "computes"):
            assert requests.get(f"http://127.0.0.1:{host.http_port}/api/{route}",
                                timeout=30).text == "done"
    tick = 0.02  # the kernel counts CPU in 10 ms ticks
    assert host.stats.cpu_seconds["computes"] >= 0.4 - tick
    assert host.stats.cpu_seconds["waits"] < 0.05


def test_the_service_bus_stand_in_polls_as_often_as_a_push_would_deliver(
        app_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Service Bus trigger is pushed each message over AMQP: its stand-in asks every 50 ms,
    idle or not, while a Storage queue's listener backs off up to maxPollingInterval (2 s)."""
    import localrun.host.listeners
    import localrun.host.polling

    seen: list[float] = []
    monkeypatch.setattr(localrun.host.listeners, "poll_loop",
                        lambda *args, max_delay, **kw: seen.append(max_delay))
    app = func.FunctionApp()

    @app.function_name("sb")
    @app.service_bus_queue_trigger(arg_name="msg", queue_name="%OrdersQueueName%",
                                   connection="ServiceBusConnection")
    def sb(msg: func.ServiceBusMessage) -> None:
        pass

    @app.function_name("q")
    @app.queue_trigger(arg_name="msg", queue_name="%SchedulerQueueName%",
                       connection="AzureWebJobsStorage")
    def q(msg: func.QueueMessage) -> None:
        pass

    host_json = {**HOST_JSON, "extensions": {
        **HOST_JSON["extensions"],  # type: ignore[dict-item]
        "queues": {**HOST_JSON["extensions"]["queues"],  # type: ignore[index]
                   "maxPollingInterval": "00:00:02"}}}
    with _host(app, app_env(), host_json=host_json):
        wait_until(lambda: len(seen) == 2, timeout=10, message="both listeners polling")
    assert sorted(seen) == [localrun.host.polling.SERVICE_BUS_POLL_SECONDS, 2.0] == [0.05, 2.0]
