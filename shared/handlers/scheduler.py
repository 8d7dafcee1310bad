"""The Scheduler: takes orders, walks the workflow, hands steps to Agents, records their replies.

Holds nothing in memory between messages: every decision starts from the state store, and every
change is a conditional write. If this process dies at any line, the record says what was done,
and the Supervisor notices what was not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from shared.adapters.queues import MessageSender
from shared.adapters.state_store import ConcurrencyConflict, StoredOrder, TableOrderStore
from shared.clock import Clock
from shared.domain.messages import (
    Action,
    AgentReply,
    AgentRequest,
    CommandKind,
    SchedulerCommand,
    idempotency_key,
)
from shared.domain.state import (
    IllegalTransition,
    OrderState,
    StepStatus,
    Transition,
    apply_reply,
    begin_compensation,
    claim,
)
from shared.domain.workflow import Workflow
from shared.handlers.notify import Notifier

log = logging.getLogger(__name__)

# A lost race means someone else changed the record; re-read and decide again, a few times.
MAX_CONFLICT_RETRIES = 5


class Outcome(StrEnum):
    APPLIED = "applied"
    IGNORED = "ignored"  # stale, duplicate or already taken: nothing to do
    UNKNOWN_ORDER = "unknown_order"


@dataclass(frozen=True)
class SchedulerResult:
    outcome: Outcome
    detail: str = ""


class Scheduler:
    def __init__(self, *, instance_id: str, store: TableOrderStore, sender: MessageSender,
                 notifier: Notifier, workflow: Workflow, agent_queues: dict[str, str],
                 clock: Clock) -> None:
        self.instance_id = instance_id
        self._store = store
        self._sender = sender
        self._notifier = notifier
        self._workflow = workflow
        self._agent_queues = agent_queues
        self._clock = clock

    def handle_command(self, body: str) -> SchedulerResult:
        cmd = SchedulerCommand.model_validate_json(body)
        step = claim if cmd.kind is CommandKind.START else begin_compensation
        return self._transact(cmd.order_id, lambda s: step(s, self.instance_id, self._clock(),
                                                          self._workflow))

    def handle_reply(self, body: str) -> SchedulerResult:
        reply = AgentReply.model_validate_json(body)
        return self._transact(reply.order_id, lambda s: apply_reply(
            s, reply, self.instance_id, self._clock(), self._workflow))

    def _transact(self, order_id: str,
                  transition: Callable[[OrderState], Transition]) -> SchedulerResult:
        for _ in range(MAX_CONFLICT_RETRIES):
            stored = self._store.load(order_id)
            if stored is None:
                log.warning("message for unknown order %s ignored", order_id)
                return SchedulerResult(Outcome.UNKNOWN_ORDER)
            try:
                t = transition(stored.state)
            except IllegalTransition as e:
                log.info("ignored: %s", e)
                return SchedulerResult(Outcome.IGNORED, str(e))
            try:
                saved = self._store.save(t.state)
            except ConcurrencyConflict:
                log.info("order %s changed under us; reading it again", order_id)
                continue
            self._carry_out(stored, saved, t)
            return SchedulerResult(Outcome.APPLIED)
        raise ConcurrencyConflict(f"order {order_id}: still contended after "
                                  f"{MAX_CONFLICT_RETRIES} attempts")

    def _carry_out(self, stored: StoredOrder, state: OrderState, t: Transition) -> None:
        """After the write: tell who needs telling, then dispatch the step it started.

        In that order because only the telling is lost if we die here: a step that was never
        dispatched is overdue at its complete-by and the Supervisor has it retried.
        """
        self._notifier.publish(state.order_id, state.reply_to, t.events, state.updated_at)
        step = state.current_step
        if step is not None and step.complete_by is not None:
            action = Action.UNDO if step.status is StepStatus.COMPENSATING else Action.DO
            definition = self._workflow.step(step.name)
            request = AgentRequest(
                order_id=state.order_id, step=step.name, action=action,
                operation=definition.operation_for(action), attempt=step.attempt,
                complete_by=step.complete_by,
                idempotency_key=idempotency_key(state.order_id, step.name, action,
                                                state.generation),
                order=stored.order,
            )
            self._sender.send(self._agent_queues[definition.agent], request.to_json())
        if state.is_settled:
            self._store.forget(state.order_id)
