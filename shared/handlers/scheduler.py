"""The Scheduler: takes orders, walks the workflow, hands steps to Agents, records their replies.

Holds nothing in memory between messages: every decision starts from the state store, and every
change is a conditional write that carries its effects (the outbox). If this process dies at any
line, the record says what was done and what is still to send; a redelivered message finishes
its own transition's outbox, and the Supervisor notices what no message will.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from shared import tracing
from shared.adapters.pauses import PauseReader
from shared.adapters.queues import MessageSender
from shared.adapters.state_store import ConcurrencyConflict, OrderStore
from shared.clock import Clock
from shared.domain import budget
from shared.domain.alerts import AlertKind, OperatorAlert
from shared.domain.messages import AgentReply, Arrival, CommandKind, SchedulerCommand
from shared.domain.pauses import check_start
from shared.domain.state import Cause, ForgedReply, IllegalTransition, OrderState, reply_cause
from shared.domain.transitions import Delivery, apply_reply, begin_compensation, claim
from shared.domain.workflow import Registry, UnknownWorkflow, Workflow
from shared.handlers.relay import EffectRelay, InHand

log = logging.getLogger(__name__)

# A lost race means someone else changed the record; re-read and decide again, a few times.
MAX_CONFLICT_RETRIES = 5
# How long a message for a newer release's order waits before an instance takes it again.
DEFER = timedelta(seconds=30)


class Outcome(StrEnum):
    APPLIED = "applied"
    REPLAYED = "replayed"  # already applied by an earlier delivery: its effects carried out again
    IGNORED = "ignored"  # stale, duplicate or already taken: nothing to do
    UNKNOWN_ORDER = "unknown_order"
    DEFERRED = "deferred"  # a newer release's order: sent again later, for an instance of it


@dataclass(frozen=True)
class Queues:
    """Where the Scheduler's own messages arrive, to put back what a newer release must take."""
    sender: MessageSender
    commands: str
    replies: str


@dataclass(frozen=True)
class SchedulerResult:
    outcome: Outcome
    detail: str = ""


class Scheduler:
    def __init__(self, *, instance_id: str, store: OrderStore, relay: EffectRelay,
                 workflows: Registry, clock: Clock, queues: Queues | None = None,
                 pauses: PauseReader | None = None) -> None:
        self.instance_id = instance_id
        self._pauses = pauses
        self._store = store
        self._relay = relay
        self._workflows = workflows
        self._clock = clock
        self._queues = queues

    def _workflow_of(self, state: OrderState) -> Workflow:
        # A version this release does not have, or a record a newer release wrote, raises
        # UnknownWorkflow before anything is written (see _defer_if_newer).
        return self._workflows.of_record(state)

    def _refused(self, state: OrderState, e: ForgedReply, cause: str) -> None:
        log.error("order %s: %s", state.order_id, e)
        self._relay.alert(OperatorAlert(
            AlertKind.REQUEST_REFUSED, state.order_id, budget.clip(str(e), budget.ERROR_TEXT),
            # Filed at the clock's time: the attempt's due time lies ahead, and near midnight in
            # a day no listing reads yet. Its key, not its time, makes copies one alert.
            self._clock(), e.step, key=f"refused.{cause}.{e.attempt_due}", source="Scheduler"))

    def _defer_if_newer(self, e: UnknownWorkflow, queue: str, body: str) -> SchedulerResult:
        """A newer release's order, met while both releases run in a rolling deployment: the
        message is put back, visible later, so that an instance of the newer release takes it.
        A new message, not a failed delivery: it never counts towards the poison queue, however
        long the rollout takes. A workflow no release has any more is raised, as before."""
        if not e.newer or self._queues is None:
            raise e
        self._queues.sender.send(queue, body, DEFER)
        log.info("left to a newer release, again in %ss: %s", DEFER.seconds, e)
        tracing.outcome(Outcome.DEFERRED.value)
        return SchedulerResult(Outcome.DEFERRED, str(e))

    def handle_command(self, body: str, redelivered: bool = False) -> SchedulerResult:
        """``redelivered``: an earlier delivery of this message failed or died."""
        try:
            return self.take(SchedulerCommand.model_validate_json(body),
                             arrival=Arrival.REDELIVERED if redelivered else Arrival.QUEUED)
        except UnknownWorkflow as e:
            return self._defer_if_newer(e, self._queues.commands if self._queues else "", body)

    def take(self, cmd: SchedulerCommand, known: InHand | None = None, *,
             arrival: Arrival = Arrival.QUEUED) -> SchedulerResult:
        """Carry out a command, from the queue or handed over in this process (intake's start).

        ``known``: the record and order as their writer just saved them, which spares the first
        read; a lost race reads them again like any other.
        """
        # A command from the queue is not taken at its word for the outbox's alerts
        # (transitions.emit): anyone who may send to the queue could have written it. One
        # handed over by the relay that carried them out is.
        delivery = Delivery(cmd.outbox_seq, vouched=arrival is Arrival.HANDED_OVER)
        redelivered = arrival is Arrival.REDELIVERED
        with tracing.span(f"scheduler {cmd.kind.value}", parent=cmd.traceparent,
                          attributes=tracing.order_attributes(cmd.order_id,
                                                              redelivered=redelivered)):
            begin = self._start if cmd.kind is CommandKind.START else begin_compensation
            cause = Cause.START if cmd.kind is CommandKind.START else Cause.COMPENSATE
            return self._transact(cmd.order_id, cause, redelivered, lambda s: begin(
                s, self.instance_id, self._clock(), self._workflow_of(s), delivery), known)

    def _start(self, state: OrderState, scheduler_id: str, now: datetime, workflow: Workflow,
               delivery: Delivery) -> OrderState:
        """Claim the order, unless its workflow is paused and it has not begun: then it waits,
        Pending, and the Supervisor holds it until the workflow is resumed."""
        if self._pauses is not None:
            check_start(state, self._pauses.current(), workflow.name)
        return claim(state, scheduler_id, now, workflow, delivery)

    def handle_reply(self, body: str, redelivered: bool = False) -> SchedulerResult:
        try:
            return self._handle_reply(body, redelivered)
        except UnknownWorkflow as e:
            return self._defer_if_newer(e, self._queues.replies if self._queues else "", body)

    def _handle_reply(self, body: str, redelivered: bool) -> SchedulerResult:
        reply = AgentReply.model_validate_json(body)
        with tracing.span("scheduler reply", parent=reply.traceparent,
                          attributes=tracing.order_attributes(
                              reply.order_id, reply.step, reply.attempt,
                              **{"order.action": reply.action.value,
                                 "order.reply": reply.outcome.value,
                                 "redelivered": redelivered})):
            return self._transact(reply.order_id, reply_cause(reply), redelivered,
                                  lambda s: apply_reply(s, reply, self.instance_id, self._clock(),
                                                        self._workflow_of(s)))

    def _transact(self, order_id: str, cause: str, redelivered: bool,
                  transition: Callable[[OrderState], OrderState],
                  known: InHand | None = None) -> SchedulerResult:
        for _ in range(MAX_CONFLICT_RETRIES):
            if known is None:
                stored = self._store.load(order_id)
                if stored is None:
                    log.warning("message for unknown order %s ignored", order_id)
                    return SchedulerResult(Outcome.UNKNOWN_ORDER)
                known = InHand(stored.state, stored.order)
            current, known = known, None
            tracing.annotate(**tracing.order_attributes(None, None, None, current.state.generation))
            try:
                new = transition(current.state)
            except IllegalTransition as e:
                if redelivered and current.state.outbox and current.state.outbox_cause == cause:
                    # This message's transition was saved by an earlier delivery that failed
                    # or died before finishing its effects (or we cannot tell): finish them.
                    # Each is harmless twice. A first delivery that lost a race leaves the
                    # winner to finish its own.
                    self._relay.carry_out(current.state, current.order)
                    tracing.outcome(Outcome.REPLAYED.value)
                    return SchedulerResult(Outcome.REPLAYED, str(e))
                if isinstance(e, ForgedReply):
                    self._refused(current.state, e, cause)
                else:
                    log.info("ignored: %s", e)
                tracing.outcome(Outcome.IGNORED.value)
                return SchedulerResult(Outcome.IGNORED, str(e))
            try:
                saved = self._store.save(new)
            except ConcurrencyConflict:
                log.info("order %s changed under us; reading it again", order_id)
                continue
            tracing.annotate(**{"order.state": saved.process_state.value})
            self._relay.carry_out(saved, current.order)
            tracing.outcome(Outcome.APPLIED.value)
            return SchedulerResult(Outcome.APPLIED)
        raise ConcurrencyConflict(f"order {order_id}: still contended after "
                                  f"{MAX_CONFLICT_RETRIES} attempts")
