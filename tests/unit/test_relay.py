"""The relay: which commands it holds back for intake to hand the Scheduler, which it sends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.domain.effects import SendCommand
from shared.domain.messages import Arrival, CommandKind, SchedulerCommand
from shared.domain.workflow import Registry
from shared.handlers.relay import EffectRelay, InHand
from tests.conftest import FakeClock
from tests.fakes import FakeAlertStore, FakeOrderStore, FakeQueues, FakeRejections, accepted
from tests.workflow import FLOW

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ORDER = {"order_id": "o-1", "customer_id": "c"}


def relay() -> tuple[EffectRelay, FakeQueues, FakeOrderStore]:
    clock = FakeClock(NOW)
    queues, store = FakeQueues(clock), FakeOrderStore()
    return EffectRelay(store=store, sender=queues, alerts=FakeAlertStore(),
                       workflows=Registry.of([FLOW]), agent_queues={}, scheduler_queue="cmds",
                       clock=clock), queues, store


def test_a_command_due_now_is_held_back_for_the_caller_when_asked() -> None:
    r, queues, store = relay()
    state = accepted(store, "o-1", NOW)
    carried = r.carry_out(state, ORDER, hold_command=True)
    assert queues.sent == [] and carried.state == state
    assert carried.held is not None
    assert (carried.held.kind, carried.held.order_id, carried.held.outbox_seq) == (
        CommandKind.START, "o-1", state.outbox_seq)
    # Not asked, it sends.
    assert r.carry_out(state, ORDER).held is None
    assert [q for q, _ in queues.sent] == ["cmds"]


def test_a_command_that_must_wait_goes_through_the_queue() -> None:
    r, queues, store = relay()
    state = accepted(store, "o-1", NOW)
    state.outbox = [SendCommand(command=CommandKind.START, reason="backoff",
                                not_before=NOW + timedelta(seconds=30))]
    assert r.carry_out(state, ORDER, hold_command=True).held is None
    assert [q for q, _ in queues.sent] == ["cmds"]
    assert queues.queues["cmds"][0].visible_at == NOW + timedelta(seconds=30)


def test_intake_hands_the_held_command_to_the_scheduler_with_the_record_in_hand() -> None:
    """The Service Bus message, redelivered until intake returns, keeps the start command:
    it is taken in the same invocation, as handed over (its outbox's alerts and statuses are
    known to have gone), with the record and order as intake saved them."""
    import json

    from shared.handlers.intake import IntakeHandler

    r, queues, store = relay()
    taken: list[tuple[SchedulerCommand, InHand | None, Arrival]] = []

    class Taker:
        def take(self, cmd: SchedulerCommand, known: InHand | None = None, *,
                 arrival: Arrival = Arrival.QUEUED) -> None:
            taken.append((cmd, known, arrival))

    intake = IntakeHandler(store=store, rejections=FakeRejections(), alerts=FakeAlertStore(),
                           relay=r, scheduler=Taker(), workflows=Registry.of([FLOW]),
                           reply_allowed=lambda q: True, clock=FakeClock(NOW))
    body = {"order_id": "o-1", "customer_id": "c",
            "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}
    intake.handle("m-1", json.dumps(body).encode())
    ((cmd, known, arrival),) = taken
    assert (cmd.kind, cmd.order_id, arrival) == (CommandKind.START, "o-1", Arrival.HANDED_OVER)
    assert known is not None and known.state == store.get_state("o-1")
    assert known.order["order_id"] == "o-1" and queues.sent == []


def test_a_status_update_the_role_refuses_does_not_stop_the_orders_work() -> None:
    """ReplyQueueAllowList let the order name its queue, the app's role (its condition's
    prefixes) does not: the courtesy copy is dropped, and the step's request still goes."""
    import json

    from shared.adapters.queues import QueueRefused
    from shared.domain.transitions import claim, receive
    from shared.workflows.orders.message import parse_order

    clock = FakeClock(NOW)
    queues, store = FakeQueues(clock), FakeOrderStore()

    class Refusing:
        def send(self, queue: str, body: str, delay: timedelta = timedelta(0)) -> None:
            if queue.startswith("partner-"):
                raise QueueRefused(f"the app may not send to queue {queue!r}")
            queues.send(queue, body, delay)

    relay = EffectRelay(store=store, sender=Refusing(), alerts=FakeAlertStore(),
                        workflows=Registry.of([FLOW]),
                        agent_queues={"alpha": "a", "beta": "b", "gamma": "c"},
                        scheduler_queue="cmds", clock=clock)
    o = parse_order(json.dumps({"order_id": "o-1", "customer_id": "c", "reply_to": "partner-x",
                                "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
    stored = store.create(o, receive("o-1", FLOW, NOW, "partner-x"))
    claimed = store.save(claim(stored, "s1", NOW, FLOW))
    assert claimed.outbox and claimed.dispatch_unconfirmed
    done = relay.carry_out(claimed, ORDER).state
    assert [q for q, _ in queues.sent] == ["a"]  # the first step's request, and no status
    assert not done.dispatch_unconfirmed
