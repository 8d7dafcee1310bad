"""What this release does with a newer release's orders, met while both run side by side in a
rolling deployment: it leaves them, unchanged, for an instance of the newer release."""

from __future__ import annotations

import dataclasses

import pytest

from shared.domain.messages import AgentReply, CommandKind, ReplyOutcome, SchedulerCommand
from shared.domain.state import SCHEMA_VERSION
from shared.domain.workflow import Registry, UnknownWorkflow
from shared.handlers.relay import EffectRelay
from shared.handlers.scheduler import DEFER, Outcome, Queues, Scheduler
from tests.conftest import FakeClock
from tests.fakes import FakeAlertStore, FakeOrderStore, FakeQueues, accepted
from tests.workflow import FLOW

COMMANDS, REPLIES = "scheduler-commands", "agent-responses"


def scheduler() -> tuple[FakeClock, FakeOrderStore, FakeQueues, Scheduler]:
    clock, store = FakeClock(), FakeOrderStore()
    queues = FakeQueues(clock)
    registry = Registry.of([FLOW])
    relay = EffectRelay(store=store, sender=queues, alerts=FakeAlertStore(), workflows=registry,
                        agent_queues={"alpha": "a", "beta": "b", "gamma": "c"},
                        scheduler_queue=COMMANDS, clock=clock)
    return clock, store, queues, Scheduler(instance_id="old", store=store, relay=relay,
                                           workflows=registry, clock=clock,
                                           queues=Queues(queues, COMMANDS, REPLIES))


# What makes an order a newer release's: a version of its workflow this release lacks, or a
# record of a newer schema (the rules a later release changes, not only its shape).
NEWER = {"workflow version": {"workflow_version": 99},
         "record schema": {"schema_version": SCHEMA_VERSION + 1},
         # ...and one whose record this release cannot even parse (a value it does not know).
         "record it cannot read": {}}


@pytest.mark.parametrize("newer", NEWER)
@pytest.mark.parametrize("kind", ["command", "reply"])
def test_a_newer_releases_message_is_put_back_for_later_and_the_record_left_as_it_is(
        kind: str, newer: str) -> None:
    clock, store, queues, s = scheduler()
    accepted(store, "o-new", clock.now)
    store.states["o-new"] = dataclasses.replace(store.states["o-new"], **NEWER[newer])
    if newer == "record it cannot read":
        store.corrupt["o-new"] = "newer: 'Held' is not a valid ProcessState"
    before = store.states["o-new"]
    if kind == "command":
        queue, body = COMMANDS, SchedulerCommand(order_id="o-new",
                                                 kind=CommandKind.START).to_json()
        result = s.handle_command(body)
    else:
        queue, body = REPLIES, AgentReply(order_id="o-new", step="hold",
                                          action="do", attempt=1,
                                          outcome=ReplyOutcome.OK).to_json()
        result = s.handle_reply(body, redelivered=True)
    assert result.outcome is Outcome.DEFERRED
    assert store.states["o-new"] == before
    # The same message, as a new one (its dequeue count starts again), visible after DEFER.
    assert queues.sent == [(queue, body)]
    assert queues.visible(queue) == []
    clock.advance(seconds=DEFER.total_seconds())
    assert [m.body for m in queues.visible(queue)] == [body]


def test_a_workflow_no_release_has_is_raised_not_put_back() -> None:
    clock, store, queues, s = scheduler()
    accepted(store, "o-gone", clock.now)
    store.states["o-gone"] = dataclasses.replace(store.states["o-gone"], workflow="gone")
    with pytest.raises(UnknownWorkflow):
        s.handle_command(SchedulerCommand(order_id="o-gone", kind=CommandKind.START).to_json())
    assert queues.sent == []
