"""Senders kept apart: the app knows a declared sender from the queue a message came on, never
from its body; the same order id from two senders is two orders; each sender's status reaches
its own queue only; a conflicting or refused message is told to whoever sent it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.configuration import resolve
from shared.domain import senders
from shared.domain.messages import Arrival, SchedulerCommand, StatusUpdate
from shared.domain.senders import Sender
from shared.domain.workflow import Registry
from shared.handlers.intake import IntakeHandler, IntakeOutcome
from shared.handlers.operator_requests import check_order_id
from shared.handlers.relay import EffectRelay, InHand
from shared.settings import Settings, SettingsError
from tests.conftest import ROOT, FakeClock
from tests.fakes import FakeAlertStore, FakeOrderStore, FakeQueues, FakeRejections
from tests.workflow import FLOW

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SHOP_A, SHOP_B = Sender("shopa"), Sender("shopb")


class World:
    def __init__(self) -> None:
        clock = FakeClock(NOW)
        self.queues, self.store = FakeQueues(clock), FakeOrderStore()
        self.alerts, self.rejections = FakeAlertStore(), FakeRejections()
        relay = EffectRelay(store=self.store, sender=self.queues, alerts=self.alerts,
                            workflows=Registry.of([FLOW]), agent_queues={},
                            scheduler_queue="cmds", clock=clock)

        class Taker:
            def take(self, cmd: SchedulerCommand, known: InHand | None = None, *,
                     arrival: Arrival = Arrival.QUEUED) -> None:
                pass

        own = frozenset({"status-shopa", "status-shopb"})
        self.intake = IntakeHandler(
            store=self.store, rejections=self.rejections, alerts=self.alerts, relay=relay,
            scheduler=Taker(), workflows=Registry.of([FLOW]),
            reply_allowed=lambda q: q.startswith("order-status-") and q not in own,
            clock=clock)

    def send(self, sender: Sender, message_id: str, **fields: Any) -> IntakeOutcome:
        body = {"order_id": "ORD-1", "customer_id": "c",
                "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}], **fields}
        body = {k: v for k, v in body.items() if v is not None}
        return self.intake.handle(message_id, json.dumps(body).encode(), sender=sender).outcome

    def status(self, queue: str) -> list[StatusUpdate]:
        return [StatusUpdate.model_validate_json(m.body) for m in self.queues.queues.get(queue, [])]


def test_one_sender_cannot_reach_anothers_status_queue_or_take_its_order_id() -> None:
    """Shop B sends under shop A's id with A's status queue as reply_to: refused, told to B,
    and A's queue hears nothing; A's own order under that id is then taken, not a conflict."""
    w = World()
    assert w.send(SHOP_B, "b-1", reply_to="status-shopa") is IntakeOutcome.INVALID
    assert w.status("status-shopa") == []
    (told,) = w.status("status-shopb")
    assert (told.event, told.order_id, told.message_id) == ("rejected", "ORD-1", "b-1")
    assert "status-shopb" in (told.detail or "")
    # Under B's own queue, B's ORD-1 is B's, and A's ORD-1 is A's.
    assert w.send(SHOP_B, "b-2") is IntakeOutcome.ACCEPTED
    assert w.send(SHOP_A, "a-1", customer_id="other") is IntakeOutcome.ACCEPTED
    assert w.store.get_state("shopa~ORD-1") is not None
    assert w.store.get_state("shopb~ORD-1") is not None
    assert [(u.event, u.order_id) for u in w.status("status-shopa")] == [("received", "ORD-1")]
    assert [u.event for u in w.status("status-shopb")] == ["rejected", "received"]


def test_the_default_sender_cannot_name_a_declared_senders_status_queue() -> None:
    w = World()
    assert w.send(senders.DEFAULT, "d-1", reply_to="status-shopa") is IntakeOutcome.INVALID
    assert w.status("status-shopa") == []
    assert w.send(senders.DEFAULT, "d-2", reply_to="order-status-d") is IntakeOutcome.ACCEPTED
    assert w.store.get_state("ORD-1") is not None
    assert w.status("status-shopa") == []


def test_a_conflict_is_told_to_the_sender_of_the_conflicting_message_only() -> None:
    w = World()
    assert w.send(SHOP_A, "a-1") is IntakeOutcome.ACCEPTED
    for delivery in range(2):  # a redelivery tells it again, under the same event id
        assert w.intake.handle("a-2", json.dumps({
            "order_id": "ORD-1", "customer_id": "changed",
            "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}).encode(),
            delivery + 1, sender=SHOP_A).outcome is IntakeOutcome.CONFLICT
    received, *rejected = w.status("status-shopa")
    assert received.event == "received"
    assert [(u.event, u.order_id, u.message_id) for u in rejected] == [
        ("rejected", "ORD-1", "a-2")] * 2
    assert rejected[0].event_id == rejected[1].event_id
    assert w.status("status-shopb") == []
    # The conflict's alert rolls up with the rest of that sender's, not with everyone's.
    (alert,) = [a for a in w.alerts.alerts.values() if a.kind == "OrderConflict"]
    assert (alert.order_id, alert.source) == ("shopa~ORD-1", "intake shopa")


def test_a_default_senders_conflict_is_told_to_no_queue_its_body_names() -> None:
    """Its reply_to is the body's word: it could name the first order's queue, where a
    "rejected" would be taken for that order's."""
    w = World()
    assert w.send(senders.DEFAULT, "d-1", reply_to="order-status-first") is (
        IntakeOutcome.ACCEPTED)
    assert w.send(senders.DEFAULT, "d-2", customer_id="other",
                  reply_to="order-status-first") is IntakeOutcome.CONFLICT
    assert [u.event for u in w.status("order-status-first")] == ["received"]


def test_a_declared_sender_may_name_its_own_status_queue_and_nothing_else() -> None:
    w = World()
    assert w.send(SHOP_A, "a-1", reply_to="status-shopa") is IntakeOutcome.ACCEPTED
    assert w.send(SHOP_A, "a-2", order_id="ORD-2",
                  reply_to="order-status-d") is IntakeOutcome.INVALID
    assert [u.event for u in w.status("status-shopa")] == ["received", "rejected"]
    assert w.status("order-status-d") == []


def test_record_ids_read_back_to_their_sender_and_are_operator_ids() -> None:
    assert senders.of_record("shopa~ORD-1") == (SHOP_A, "ORD-1")
    assert senders.of_record("ORD-1") == (senders.DEFAULT, "ORD-1")
    check_order_id("shopa~ORD-1")
    with pytest.raises(ValueError):
        check_order_id("Shop-A~ORD-1")


@pytest.mark.parametrize(("declared", "problem"), [
    ("shop-a", "not a sender's name"), ("a,a", "named twice"), ("A", "not a sender's name"),
    ("x", "is x's queue")])
def test_a_wrong_senders_setting_stops_the_start_naming_it(declared: str, problem: str) -> None:
    settings = Settings.model_validate({"Senders": declared, "OrdersQueueName": "orders-x",
                                        "SimulatorBaseUrl": "http://localhost:1/sim"})
    with pytest.raises(SettingsError, match=problem):
        resolve(settings, Registry.of([FLOW]))


def test_each_declared_sender_has_an_intake_on_its_own_queue() -> None:
    script = ("import function_app; from localrun.host.index import functions_of; "
              "print({f.name: [b['queueName'] for b in f.bindings if b['type'] == "
              "'serviceBusTrigger'] for f in functions_of(function_app.app) "
              "if f.name.startswith('intake')})")
    env = {**os.environ, "Senders": "shopa,shopb",
           "AzureWebJobsStorage": "UseDevelopmentStorage=true", "SimulatorsEnabled": "true"}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    assert eval(out) == {"intake": ["%OrdersQueueName%"], "intake_shopa": ["orders-shopa"],
                         "intake_shopb": ["orders-shopb"]}
