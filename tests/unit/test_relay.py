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
             redelivered: bool = False) -> None:
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
