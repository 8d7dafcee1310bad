"""End to end: a 20-second storage outage under load is not the orders' fault.

Two runs of the same orders at a steady rate through two local hosts, with transient faults at
the remote services: one without an outage, one with Azurite paused (SIGSTOP) for 20 seconds in
the middle. Every order must settle in both, and the outage may not raise the share of orders
that end in Error beyond noise.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from azure.data.tables import TableServiceClient
from azure.storage.queue import QueueServiceClient

from localrun.azurite import Azurite
from localrun.servicebus import LocalServiceBusChannel
from shared import bootstrap
from shared.settings import load_settings
from tests.conftest import unique_settings, wait_until
from tests.e2e.test_pipeline import Host, is_settled, settled
from tests.integration.helpers import order

ORDERS = 120
RATE = 6.0  # orders per second
OUTAGE_SECONDS = 20
SETTINGS = {
    "StepBudgetSeconds": "reserve_inventory=6,charge_payment=6,arrange_shipping=6",
    # One counted failure fails an order: every failure the outage were charged would show.
    "FailureThreshold": "1",
    "RetryBackoffSeconds": "1",
    "RetryBackoffMaxSeconds": "2",
    "PendingGraceSeconds": "5",
    "SupervisorSchedule": "*/1 * * * * *",
    # Two and a half ticks: one slow tick is not an outage, a 20-second pause is.
    "OutageGapSeconds": "3",
    "SimTransientErrorRate": "0.1",
    "SimPermanentErrorRate": "0",
    "SimHangRate": "0",
    "CircuitBreakerFailures": "1000",
}


def _run(tmp_path: Path, name: str, outage: bool) -> Counter[str]:
    az = Azurite.start()
    hosts: list[Host] = []
    try:
        env = unique_settings(az.connection_string, **SETTINGS)
        c = bootstrap.build(load_settings(env))
        c.ensure_resources()
        c.close()
        hosts = [Host(env, f"{name}-A", tmp_path), Host(env, f"{name}-B", tmp_path)]
        channel = LocalServiceBusChannel(
            QueueServiceClient.from_connection_string(az.connection_string),
            env["OrdersQueueName"])
        channel.ensure()
        ids = [f"{name}-{i:04d}" for i in range(ORDERS)]

        def send() -> None:
            started = time.monotonic()
            for i, oid in enumerate(ids):
                time.sleep(max(0.0, started + i / RATE - time.monotonic()))
                channel.send(json.dumps(order(oid)), message_id=oid)

        sender = threading.Thread(target=send)
        sender.start()
        if outage:
            time.sleep(ORDERS / RATE / 2)  # in the middle of the load
            os.killpg(az.process.pid, signal.SIGSTOP)
            try:
                time.sleep(OUTAGE_SECONDS)  # the outage itself, not a synchronisation
            finally:
                os.killpg(az.process.pid, signal.SIGCONT)
        sender.join()
        tables = TableServiceClient.from_connection_string(az.connection_string)

        def all_settled() -> bool:
            states = settled(tables, env)
            return len(states) == ORDERS and all(is_settled(s) for s in states)

        wait_until(all_settled, timeout=600, interval=1, message=f"{name}: every order settled")
        states = settled(tables, env)
        assert sorted(s["OrderID"] for s in states) == sorted(ids), "an order was lost"
        return Counter(s["ProcessState"] for s in states)
    finally:
        for h in hosts:
            h.stop()
        az.stop()


@pytest.mark.timeout(1500)
def test_a_storage_outage_does_not_fail_orders(tmp_path: Path) -> None:
    calm = _run(tmp_path, "calm", outage=False)
    stormy = _run(tmp_path, "outage", outage=True)
    summary: dict[str, Any] = {"without_outage": dict(calm), "with_outage": dict(stormy)}
    print(json.dumps(summary))
    # Within noise: now and then transient faults outlast a step's budget and fail an order.
    assert stormy["Error"] <= calm["Error"] + 2, summary
