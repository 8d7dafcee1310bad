"""Against a real Service Bus (a namespace or the emulator): the CLI's orders arrive as sent.

Runs when SERVICEBUS_CONNECTION_STRING (or SERVICEBUS_NAMESPACE, with `az login`) is set;
SERVICEBUS_QUEUE names the queue (default: orders). It receives and completes the messages it
sent, so point it at a queue no running app is reading.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from orderctl.main import run

CONNECTION = os.environ.get("SERVICEBUS_CONNECTION_STRING")
NAMESPACE = os.environ.get("SERVICEBUS_NAMESPACE")
QUEUE = os.environ.get("SERVICEBUS_QUEUE", "orders")

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not (CONNECTION or NAMESPACE), reason=(
        "no Service Bus here: set SERVICEBUS_CONNECTION_STRING (or SERVICEBUS_NAMESPACE and "
        "az login) to run the live test")),
]


def _client() -> object:
    from azure.servicebus import ServiceBusClient

    if CONNECTION:
        return ServiceBusClient.from_connection_string(CONNECTION)
    from azure.identity import DefaultAzureCredential

    ns = NAMESPACE if "." in (NAMESPACE or "") else f"{NAMESPACE}.servicebus.windows.net"
    return ServiceBusClient(ns, DefaultAzureCredential())


def test_cli_orders_arrive_with_id_body_and_properties(
        capsys: pytest.CaptureFixture[str]) -> None:
    target = ["--connection-string", CONNECTION] if CONNECTION else ["--namespace", NAMESPACE]
    seed = str(uuid.uuid4().int % 10**9)
    assert run(["send", *target, "--queue", QUEUE, "--count", "3", "--seed", seed]) == 0  # type: ignore[list-item]
    sent = capsys.readouterr().out.split()
    assert len(sent) == 3
    received = {}
    with _client() as client, client.get_queue_receiver(QUEUE, max_wait_time=15) as rx:  # type: ignore[attr-defined]
        while len(received) < 3:
            batch = rx.receive_messages(max_message_count=10, max_wait_time=15)
            if not batch:
                break
            for m in batch:
                if m.message_id in sent:
                    received[m.message_id] = m
                    rx.complete_message(m)
                else:
                    rx.abandon_message(m)  # not ours: leave it for whoever owns it
    assert set(received) == set(sent)
    for mid, m in received.items():
        body = json.loads(b"".join(m.body))
        assert body["order_id"] == mid
        assert m.content_type == "application/json"
        props = {k.decode() if isinstance(k, bytes) else k: v
                 for k, v in (m.application_properties or {}).items()}
        source = props["source"]
        assert (source.decode() if isinstance(source, bytes) else source) == "orders-cli"
