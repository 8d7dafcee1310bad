"""`python -m localrun host` as a developer runs it: on any port, and stopped with Ctrl-C.

The host is started with local.settings.template.json as its settings file, as a developer's
copy would be (its simulated services at http://localhost:7071/api/sim), on another port.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableServiceClient
from azure.storage.queue import QueueServiceClient

from localrun.azurite import Azurite, free_port
from orderctl.senders import LocalSender
from tests.conftest import ROOT, unique_settings, wait_until
from tests.integration.helpers import order

TEMPLATE = ROOT / "local.settings.template.json"
KEY = "test-function-key"
NO_FAULTS = {"SimTransientErrorRate": "0", "SimPermanentErrorRate": "0", "SimHangRate": "0",
             "SimLatencyMs": "0"}


class HostProcess:
    def __init__(self, settings: dict[str, str], out: Path, *args: str) -> None:
        self.port = free_port()
        self.out, self.err = out.with_suffix(".out"), out.with_suffix(".err")
        # Settings the test does not give come from the template, as from a developer's
        # local.settings.json: SimulatorBaseUrl among them, on port 7071.
        given = {k: v for k, v in os.environ.items()
                 if k not in json.loads(TEMPLATE.read_text())["Values"]}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "localrun", "host", "--port", str(self.port),
             "--settings", str(TEMPLATE), "--poll-interval", "0.2", *args],
            cwd=ROOT, env={**given, **settings},
            stdout=self.out.open("w"), stderr=self.err.open("w"),
            # As a shell starts a job in the background: SIGINT ignored. Ctrl-C must work all
            # the same (the host sets its own handler).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        self.started = wait_until(lambda: self.event("started") or self._exited(), timeout=60,
                                  message="the host to start")
        assert isinstance(self.started, dict) and self.started.get("event") == "started", \
            self.err.read_text()[-3000:]

    def _exited(self) -> bool:
        return self.proc.poll() is not None

    def event(self, name: str) -> dict[str, Any] | None:
        for line in self.out.read_text().splitlines():
            if line.startswith("{") and json.loads(line).get("event") == name:
                return dict(json.loads(line))
        return None

    def url(self, route: str) -> str:
        return f"http://127.0.0.1:{self.port}/api/{route}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def host_settings(azurite: Azurite) -> Iterator[dict[str, str]]:
    settings = unique_settings(azurite.connection_string, **NO_FAULTS,
                               LOCALRUN_LOG_LEVEL="WARNING")
    yield settings


def send(settings: dict[str, str], order_id: str) -> None:
    sender = LocalSender(
        QueueServiceClient.from_connection_string(settings["AzureWebJobsStorage"]),
        settings["OrdersQueueName"])
    sender.send([(order_id, json.dumps(order(order_id)).encode())])


def state_of(settings: dict[str, str], order_id: str) -> str | None:
    table = TableServiceClient.from_connection_string(
        settings["AzureWebJobsStorage"]).get_table_client(settings["StateTableName"])
    found = list(table.query_entities("PartitionKey eq @p and RowKey eq 'state'",
                                      parameters={"p": order_id}))
    return str(found[0]["ProcessState"]) if found else None


def test_on_any_port_the_agents_call_the_simulated_services_this_host_serves(
        host_settings: dict[str, str], tmp_path: Path) -> None:
    """The template says http://localhost:7071/api/sim; a host on another port serves them on
    its own, and its Agents call them there (not 7071, where another host, or none, runs)."""
    host = HostProcess({**host_settings, "PYTHON_THREADPOOL_THREAD_COUNT": "40"},
                       tmp_path / "host", "--create-resources")
    try:
        assert host.started["simulators"] == f"http://localhost:{host.port}/api/sim"
        # A pool from a settings file made before a service was added is pointed out.
        assert "PYTHON_THREADPOOL_THREAD_COUNT is 40, fewer than the" in host.err.read_text()
        from shared.workflows import REGISTRY

        assert host.started["workflows"] == REGISTRY.describe()  # each, with its versions
        assert (f"SimulatorBaseUrl is http://localhost:{host.port}/api/sim"
                in host.err.read_text())
        oid = f"port-{host.port}-{time.monotonic_ns()}"
        send(host_settings, oid)
        wait_until(lambda: state_of(host_settings, oid) == "Processed", timeout=60,
                   message=f"{oid} Processed")
    finally:
        host.proc.send_signal(signal.SIGINT)
        host.proc.wait(timeout=30)
        host.kill()
    assert host.proc.returncode == 0, host.err.read_text()[-3000:]


def test_ctrl_c_abandons_a_hung_invocation_and_stops_within_5_seconds(
        host_settings: dict[str, str], tmp_path: Path) -> None:
    """A payment call hangs (the simulator's test card: an order id sim-hang-payment-...) for
    far longer than the host would wait: Ctrl-C stops the host in 5 s all the same, abandons
    that invocation (its request message stays on its queue, neither deleted nor poisoned),
    and whatever asks it over HTTP meanwhile gets an answer or 503, never a 500 or a
    traceback. SIGINT comes ignored from the parent, as a shell's background job has it."""
    settings = {**host_settings, "SimHangSeconds": "120", "AgentCallTimeoutSeconds": "60",
                "CircuitBreakerWindowSeconds": "60"}
    records = tmp_path / "messages.jsonl"
    host = HostProcess(settings, tmp_path / "host", "--create-resources", "--record-messages",
                       str(records))
    answers: list[tuple[int, str]] = []
    stop_asking = threading.Event()

    def ask() -> None:  # the console, polling, as the host goes down
        with httpx.Client(timeout=5) as client:
            while not stop_asking.is_set():
                try:
                    r = client.get(host.url("health"), headers={"x-functions-key": KEY})
                    answers.append((r.status_code, r.text))
                except httpx.TransportError:
                    pass  # closed: nothing served
                stop_asking.wait(0.05)

    asker = threading.Thread(target=ask, daemon=True)
    try:
        oid = f"sim-hang-payment-{time.monotonic_ns()}"
        send(settings, oid)
        payment_queue = settings["PaymentRequestsQueueName"]
        # The payment Agent has its request: its invocation is under way, and hangs.
        wait_until(lambda: records.exists() and payment_queue in records.read_text(),
                   timeout=60, message="the payment Agent to take its request")
        asker.start()
        wait_until(lambda: answers, timeout=10, message="a first health answer")
        sent = time.monotonic()
        host.proc.send_signal(signal.SIGINT)
        host.proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        stop_asking.set()
        host.kill()
    stopped = host.event("stopped")
    err = host.err.read_text()
    assert host.proc.returncode == 0, err[-3000:]
    assert took <= 5, f"Ctrl-C took {took:.1f} s"
    assert stopped is not None and stopped["abandoned"] >= 1, stopped
    assert "Traceback" not in err + host.out.read_text()
    assert answers and all(status in (200, 503) for status, _ in answers), answers
    assert not any("Traceback" in text for _, text in answers), answers
    queues = QueueServiceClient.from_connection_string(settings["AzureWebJobsStorage"])
    # Abandoned: still on its queue, invisible until its lease runs out; nothing poisoned.
    props = queues.get_queue_client(payment_queue).get_queue_properties()
    assert props.approximate_message_count == 1
    poison = queues.get_queue_client(payment_queue + "-poison")
    with contextlib.suppress(ResourceNotFoundError):  # never made: nothing poisoned either
        assert poison.get_queue_properties().approximate_message_count == 0
