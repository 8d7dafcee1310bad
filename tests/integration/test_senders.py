"""Declared senders against Azurite, through each sender's registered intake: the same order
id from two senders is two orders, each finished; each sender's status reaches its own queue
only, naming its own id and the message it sent; a message naming another's queue is refused
and told to its sender."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import azure.functions as func
import pytest

from localrun.host.index import functions_of
from shared import bootstrap
from shared.domain.senders import Sender
from shared.functions import pipeline
from tests.integration.helpers import drain_json, entities, order, sb_message
from tests.integration.test_intake import _process


def _intakes(*senders: Sender) -> dict[str, Any]:
    app = func.FunctionApp()
    app.register_functions(pipeline.pipeline(senders))
    return {f.name: f.call for f in functions_of(app)}


def test_two_senders_same_id_kept_apart_through_to_completion(
        app_env: Callable[..., dict[str, str]]) -> None:
    t = uuid.uuid4().hex[:8]
    a, b = Sender(f"a{t}"), Sender(f"b{t}")
    env = app_env(Senders=f"{a.name},{b.name}")
    intakes = _intakes(a, b)
    # B names A's status queue: refused, told to B, and A hears nothing.
    intakes[b.intake_function](msg=sb_message(order("ORD-1", reply_to=a.status_queue),
                                              message_id="b-1"))
    assert drain_json(a.status_queue) == []
    (told,) = drain_json(b.status_queue)
    assert (told["event"], told["message_id"]) == ("rejected", "b-1")
    (rej,) = entities(env["RejectedOrdersTableName"])
    assert rej["Reason"].startswith(f"from {b.name}: reply_to")
    assert rej["MessageId"] == b.record_id("b-1")  # kept as its orders are: by sender
    # The same id from each, under each one's own queue: two orders, each finished.
    intakes[a.intake_function](msg=sb_message(order("ORD-1"), message_id="a-1"))
    _process(a.record_id("ORD-1"), env)
    intakes[b.intake_function](msg=sb_message(order("ORD-1", customer_id="other"),
                                              message_id="b-2"))
    _process(b.record_id("ORD-1"), env)
    c = bootstrap.container()
    for sender in (a, b):
        state = c.store.get_state(sender.record_id("ORD-1"))
        assert state is not None and state.process_state.value == "Processed"
        updates = drain_json(sender.status_queue)
        assert [u["event"] for u in updates][-1] == "completed"
        assert {(u["order_id"], u["message_id"]) for u in updates} == {
            ("ORD-1", "a-1" if sender is a else "b-2")}
    # Not one rejection more, and no conflict: the second ORD-1 was B's own.
    assert len(entities(env["RejectedOrdersTableName"])) == 1


def test_the_cli_sends_as_a_declared_sender_and_prints_the_ids_the_app_keeps(
        app_env: Callable[..., dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    import base64
    import json

    from localrun.servicebus import LocalServiceBusChannel
    from orderctl.main import run

    sender = Sender(f"c{uuid.uuid4().hex[:8]}")
    app_env(Senders=sender.name)
    settings = ["--settings", "/nonexistent/local.settings.json"]
    assert run([*settings, "send", "--local", "--sender", sender.name, "--count", "2",
                "--json"]) == 0
    sent = json.loads(capsys.readouterr().out)
    assert sent["queue"] == sender.orders_queue
    assert all(i.startswith(f"{sender.name}~") for i in sent["sent"])
    channel = LocalServiceBusChannel(bootstrap.container().queues, sender.orders_queue)
    envelopes = [json.loads(m.content) for m in channel.queue.peek_messages(max_messages=8)]
    intake = _intakes(sender)[sender.intake_function]
    for e in envelopes:
        intake(msg=sb_message(base64.b64decode(e["body"]), message_id=e["message_id"]))
    for record_id in sent["sent"]:
        assert run([*settings, "status", record_id, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["OrderID"] == record_id
    assert run([*settings, "send", "--local", "--sender", "Not-A-Name"]) == 2
    assert run([*settings, "send", "--local", "--sender", "x", "--queue", "q"]) == 2
