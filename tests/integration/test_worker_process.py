"""The Python worker in a process of its own (localrun/host/worker.py), as in Azure: the host
keeps its side of each message, the worker builds the value and runs the function, and whatever
the worker does (fails, dies) ends in the host's known outcome for that trigger."""

from __future__ import annotations

import base64
import json
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from azure.storage.queue import QueueClient, TextBase64EncodePolicy

from localrun.azurite import free_port
from localrun.host.host import LocalFunctionHost
from localrun.host.worker import InvocationFailed, WorkerProcess
from localrun.metering import StorageMeter
from tests.conftest import wait_until
from tests.integration import worker_app

HOST_JSON = {"version": "2.0", "extensions": {"queues": {
    "maxPollingInterval": "00:00:00.1", "visibilityTimeout": "00:00:00", "batchSize": 4,
    "newBatchThreshold": 2, "maxDequeueCount": 3, "messageEncoding": "base64"}}}


@pytest.fixture
def probe_env(app_env: Any, tmp_path: Path) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    env = app_env(ProbeQueueName=f"probe-{tag}", ProbeRepliesQueueName=f"probe-{tag}-replies")
    host_json = tmp_path / "host.json"
    host_json.write_text(json.dumps(HOST_JSON))
    conn = env["AzureWebJobsStorage"]
    replies = QueueClient.from_connection_string(conn, env["ProbeRepliesQueueName"])
    replies.create_queue()
    probe = QueueClient.from_connection_string(conn, env["ProbeQueueName"],
                                               message_encode_policy=TextBase64EncodePolicy())
    probe.create_queue()
    return {"env": env, "host_json": host_json, "replies": replies, "probe": probe}


def _host(p: dict[str, Any], **kw: Any) -> tuple[LocalFunctionHost, WorkerProcess]:
    worker = WorkerProcess("tests.integration.worker_app:app", settings=p["env"],
                           storage_connection=p["env"]["AzureWebJobsStorage"],
                           host_json=p["host_json"])
    host = LocalFunctionHost(worker_app.app, settings=p["env"],
                             storage_connection=p["env"]["AzureWebJobsStorage"],
                             host_json=p["host_json"], worker=worker, **kw)
    return host, worker


def _replies(p: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m.content) for m in p["replies"].receive_messages(max_messages=32)]


def test_a_queue_message_runs_in_the_worker_process(probe_env: dict[str, Any]) -> None:
    host, worker = _host(probe_env)
    with host:
        probe_env["probe"].send_message("hello")
        (reply,) = wait_until(lambda: _replies(probe_env), message="the probe's reply")
        # Settled by the host once the worker answered: the message is gone.
        wait_until(lambda: not probe_env["probe"].peek_messages(), message="the delete")
        assert reply["pid"] == worker.pid != os.getpid()
        # The value was built in the worker from the host's data: the message's own metadata.
        assert reply == {"pid": worker.pid, "body": "hello", "dequeue_count": 1}
        assert host.stats.invocations == {"probe": 1} and not host.stats.failures
        assert host.stats.cpu_seconds["probe"] >= 0


def test_a_failure_in_the_worker_is_retried_then_poisoned_by_the_host(
        probe_env: dict[str, Any]) -> None:
    host, _ = _host(probe_env)
    poison = QueueClient.from_connection_string(probe_env["env"]["AzureWebJobsStorage"],
                                                probe_env["env"]["ProbeQueueName"] + "-poison")
    with host:
        probe_env["probe"].send_message("fail")
        wait_until(lambda: host.stats.poisoned == 1, message="the poison queue")
    assert host.stats.failures == {"probe": 3}  # maxDequeueCount
    (moved,) = poison.receive_messages()
    assert moved.content == "ZmFpbA=="  # as it came, base64


def test_an_http_response_crosses_back_and_a_worker_that_dies_fails_what_it_held(
        probe_env: dict[str, Any]) -> None:
    port = free_port()
    host, worker = _host(probe_env, http_port=port, only={"whoami"})
    url = f"http://127.0.0.1:{port}/api/whoami"
    with host:
        r = requests.get(url, params={"name": "ann"}, timeout=30)
        assert r.status_code == 201 and r.headers["X-Probe"] == "yes"
        assert r.json() == {"pid": worker.pid, "name": "ann"}
        answered: list[requests.Response] = []
        caller = threading.Thread(
            target=lambda: answered.append(requests.get(url, params={"hang": "1"}, timeout=30)))
        caller.start()
        wait_until(lambda: host.stats.invocations.get("whoami", 0) == 1
                   and len(worker._pending) == 1, message="the hanging call in the worker")
        os.kill(worker.pid, 9)
        caller.join(timeout=30)
        # Failed, not hung: the host answers as for a function that failed.
        assert [a.status_code for a in answered] == [500]
        assert host.stats.failures == {"whoami": 1}
        with pytest.raises(InvocationFailed):
            worker.reset_counts()
        # ... and what comes after fails at once, counted as the function's failure.
        assert requests.get(url, timeout=30).status_code == 500
        assert host.stats.failures == {"whoami": 2}


def test_what_the_worker_sets_on_an_output_binding_is_sent_by_the_host(
        probe_env: dict[str, Any]) -> None:
    port, meter = free_port(), StorageMeter()
    host, worker = _host(probe_env, http_port=port, only={"relay"},
                         queue_options=meter.queue_options)
    with host:
        r = requests.post(f"http://127.0.0.1:{port}/api/relay", data=b"hi", timeout=30)
        assert r.status_code == 202
    (m,) = probe_env["replies"].receive_messages()
    # Set in the worker, sent from the host's process (its client), base64 as host.json says.
    assert json.loads(base64.b64decode(m.content)) == {"pid": worker.pid, "body": "hi"}
    assert meter.per_function() == {"relay": {"queue.send": 1}}
