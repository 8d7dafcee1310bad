"""The relay's in-process hand-over: which commands it gives the Scheduler and which it sends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.domain.effects import SendCommand
from shared.domain.messages import CommandKind, SchedulerCommand
from shared.domain.workflow import Registry
from shared.handlers.relay import EffectRelay, Known
from tests.conftest import FakeClock
from tests.fakes import FakeAlertSink, FakeOrderStore, FakeQueues, accepted
from tests.workflow import FLOW

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ORDER = {"order_id": "o-1", "customer_id": "c"}


class Taker:
    def __init__(self) -> None:
        self.taken: list[tuple[SchedulerCommand, Known | None]] = []

    def take(self, cmd: SchedulerCommand, known: Known | None = None, *,
             redelivered: bool = False, handed_over: bool = False) -> None:
        assert handed_over  # the relay says it carried out the outbox the command came from
        self.taken.append((cmd, known))


def relays() -> tuple[EffectRelay, EffectRelay, FakeQueues, Taker, FakeOrderStore]:
    clock = FakeClock(NOW)
    queues, taker, store = FakeQueues(clock), Taker(), FakeOrderStore()
    relay = EffectRelay(store=store, sender=queues, alerts=FakeAlertSink(),
                        workflows=Registry.of([FLOW]), agent_queues={},
                        scheduler_queue="cmds",
                        clock=clock)
    return relay, relay.handing_commands_to(taker), queues, taker, store


def test_a_command_due_now_goes_to_the_scheduler_with_the_record_and_order_in_hand() -> None:
    plain, handing, queues, taker, store = relays()
    state = accepted(store, "o-1", NOW)
    handing.carry_out(state, ORDER)
    assert queues.sent == []
    ((cmd, known),) = taker.taken
    assert (cmd.kind, cmd.order_id, cmd.outbox_seq) == (CommandKind.START, "o-1",
                                                       state.outbox_seq)
    assert known == Known(state, ORDER)
    # The relay it came from is unchanged: it still sends.
    plain.carry_out(state, ORDER)
    assert [q for q, _ in queues.sent] == ["cmds"] and len(taker.taken) == 1


def test_without_the_order_in_hand_the_scheduler_reads_it_itself() -> None:
    _, handing, queues, taker, store = relays()
    handing.carry_out(accepted(store, "o-1", NOW))
    ((_, known),) = taker.taken
    assert known is None and queues.sent == []


def test_a_command_that_must_wait_goes_through_the_queue() -> None:
    _, handing, queues, taker, store = relays()
    state = accepted(store, "o-1", NOW)
    state.outbox = [SendCommand(command=CommandKind.START, reason="backoff",
                                not_before=NOW + timedelta(seconds=30))]
    handing.carry_out(state, ORDER)
    assert taker.taken == [] and [q for q, _ in queues.sent] == ["cmds"]
    assert queues.queues["cmds"][0].visible_at == NOW + timedelta(seconds=30)


def test_a_status_update_the_role_refuses_does_not_stop_the_orders_work() -> None:
    """ReplyQueueAllowList let the order name its queue, the app's role (its condition's
    prefixes) does not: the courtesy copy is dropped, and the step's request still goes."""
    import json

    from shared.adapters.queues import QueueRefused
    from shared.domain.state import claim, receive
    from shared.workflows.orders.message import parse_order

    clock = FakeClock(NOW)
    queues, store = FakeQueues(clock), FakeOrderStore()

    class Refusing:
        def send(self, queue: str, body: str, delay: timedelta = timedelta(0)) -> None:
            if queue.startswith("partner-"):
                raise QueueRefused(f"the app may not send to queue {queue!r}")
            queues.send(queue, body, delay)

    relay = EffectRelay(store=store, sender=Refusing(), alerts=FakeAlertSink(),
                        workflows=Registry.of([FLOW]),
                        agent_queues={"alpha": "a", "beta": "b", "gamma": "c"},
                        scheduler_queue="cmds", clock=clock)
    o = parse_order(json.dumps({"order_id": "o-1", "customer_id": "c", "reply_to": "partner-x",
                                "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
    stored = store.create(o, receive("o-1", FLOW, NOW, "partner-x"))
    claimed = store.save(claim(stored, "s1", NOW, FLOW).state)
    assert claimed.outbox and claimed.dispatch_unconfirmed
    done = relay.carry_out(claimed, ORDER)
    assert [q for q, _ in queues.sent] == ["a"]  # the first step's request, and no status
    assert not done.dispatch_unconfirmed
