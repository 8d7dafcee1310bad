"""The one piece of code that carries out what a committed transition caused: its outbox.

The Scheduler, the Supervisor, intake and the operator each write a transition with its outbox
(shared/domain/effects.py), then hand the saved record here. Why an effect cut short is carried
out again, and harmless twice: docs/architecture.md, What follows a write: the outbox.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, NamedTuple

from shared import tracing
from shared.adapters.alerts import AlertSink
from shared.adapters.queues import MessageSender, QueueNotFound, QueueRefused
from shared.adapters.state_store import ConcurrencyConflict, OrderStore
from shared.clock import Clock
from shared.domain import senders
from shared.domain.alerts import OperatorAlert
from shared.domain.effects import (
    Dispatch,
    Forget,
    RaiseAlert,
    SendCommand,
    SendStatus,
    delay_until,
)
from shared.domain.messages import (
    Action,
    AgentRequest,
    SchedulerCommand,
    StatusUpdate,
    undo_key,
)
from shared.domain.state import OrderState
from shared.domain.workflow import Registry

log = logging.getLogger(__name__)


class OrderRowMissing(LookupError):
    """A step must be dispatched but the order it carries is gone from the store."""


class InHand(NamedTuple):
    """A record and its order as their writer has them, so the next reader need not read them."""

    state: OrderState
    order: dict[str, Any]


class Carried(NamedTuple):
    """The record as it now stands in the store, and the command it held back (hold_command):
    the caller hands it to the Scheduler in this process."""

    state: OrderState
    held: SchedulerCommand | None = None


class EffectRelay:
    def __init__(self, *, store: OrderStore, sender: MessageSender, alerts: AlertSink,
                 workflows: Registry, agent_queues: dict[str, str], scheduler_queue: str,
                 clock: Clock) -> None:
        self._store = store
        self._sender = sender
        self._alerts = alerts
        self._workflows = workflows
        self._agent_queues = agent_queues
        self._scheduler_queue = scheduler_queue
        self._clock = clock

    @property
    def workflows(self) -> Registry:
        return self._workflows

    def alert(self, alert: OperatorAlert) -> None:
        """An alert no transition records (a message refused before any transition)."""
        self._alerts.raise_alert(alert)

    def carry_out(self, state: OrderState, order: dict[str, Any] | None = None, *,
                  hold_command: bool = False) -> Carried:
        """Carry out the record's outbox.

        ``hold_command``: a command due now is not sent but handed back, for the caller to give
        the Scheduler in this process. For a writer whose own trigger is redelivered until it
        returns (intake: the Service Bus message), so the command needs no message of its own
        to survive a crash: the queue hop, its three transactions and the Scheduler's first read
        are saved. A command that must wait (a backoff) still goes through the queue.
        """
        held: SchedulerCommand | None = None
        # Every message continues the order's trace: from the span at work, or else (nothing
        # traced here) from the context the order recorded at intake.
        traceparent = tracing.current_traceparent() or state.trace
        # The transition this outbox follows, as an event of the span that made it.
        step = state.current_step
        tracing.event("order.transition", cause=state.outbox_cause,
                      state=state.process_state.value,
                      compensation=state.compensation.value if state.compensation else None,
                      step=step.name if step else None,
                      step_status=step.status.value if step else None,
                      failures=state.failure_count)
        for effect in state.outbox:
            if isinstance(effect, RaiseAlert):
                tracing.event("alert", kind=effect.alert.value, step=effect.step,
                              reason=effect.reason)
                self._alerts.raise_alert(OperatorAlert(
                    effect.alert, state.order_id, effect.reason, effect.at, effect.step,
                    effect.key))
            elif isinstance(effect, SendStatus):
                tracing.event(f"order.{effect.event}", step=effect.step, detail=effect.detail)
                self._status(state, effect, traceparent)
            elif isinstance(effect, SendCommand):
                cmd = SchedulerCommand(kind=effect.command, order_id=state.order_id,
                                       reason=effect.reason, outbox_seq=state.outbox_seq,
                                       traceparent=traceparent)
                delay = delay_until(effect.not_before, self._clock())
                if hold_command and delay == 0:
                    held = cmd
                else:
                    self._sender.send(self._scheduler_queue, cmd.to_json(),
                                      timedelta(seconds=delay))
            elif isinstance(effect, Dispatch):
                order = self._dispatch(state, effect, order, traceparent)
            elif isinstance(effect, Forget) and state.index_key:
                self._store.drop(state.index_key)
        # A dispatch is confirmed, so the Supervisor can tell a request never sent (sent again,
        # free) from an Agent that did not answer in time (a failure that counts). Other
        # outboxes need none: the next transition, or leaving the index, shows they were done.
        if not state.dispatch_unconfirmed:
            return Carried(state, held)
        try:
            return Carried(self._store.confirm_outbox(state), held)
        except ConcurrencyConflict:
            # The record moved on (the reply came first): nothing to confirm.
            return Carried(state, held)

    def _status(self, state: OrderState, effect: SendStatus, traceparent: str | None) -> None:
        if not state.reply_to:
            return
        self.tell(state.reply_to, StatusUpdate(
            order_id=senders.own_id(state.order_id), event=effect.event, at=effect.at,
            step=effect.step, detail=effect.detail, event_id=effect.id, traceparent=traceparent,
            message_id=state.message_id))

    def tell(self, queue: str, update: StatusUpdate) -> None:
        """A status update to a sender's queue: a courtesy copy, never a reason to stop."""
        try:
            self._sender.send(queue, update.to_json())
        except QueueNotFound as e:
            # The submitter's queue is gone: their loss, and no reason to stop the order.
            log.warning("status %s for %s not sent: %s", update.event, update.order_id, e)
        except QueueRefused as e:
            # Allowed by ReplyQueueAllowList, refused by the app's role (its condition lists the
            # prefixes and the senders' queues the Bicep was given).
            log.error("status %s for %s not sent: %s; give the app's role the same reply queue "
                      "prefixes as ReplyQueueAllowList and the same Senders (docs/settings.md)",
                      update.event, update.order_id, e)

    def _dispatch(self, state: OrderState, effect: Dispatch, order: dict[str, Any] | None,
                  traceparent: str | None) -> dict[str, Any]:
        step = state.step(effect.step)
        if order is None:
            stored = self._store.load(state.order_id)
            if stored is None:
                raise OrderRowMissing(f"order {state.order_id}: no order row to dispatch")
            order = stored.order
        if step.work_key is None or step.complete_by is None or step.attempt != effect.attempt:
            raise ValueError(f"order {state.order_id}: outbox names {effect} but the step reads "
                             f"{step}")  # a transition wrote an outbox that contradicts it
        definition = self._workflows.of_record(state).step(step.name)
        undo = effect.action is Action.UNDO
        request = AgentRequest(
            order_id=state.order_id, step=step.name, action=effect.action,
            operation=definition.operation_for(effect.action), attempt=step.attempt,
            complete_by=step.complete_by,
            idempotency_key=(step.undo_key or undo_key(step.work_key)) if undo
            else step.work_key,
            compensates=step.work_key if undo else None,
            order=order, outbox_seq=state.outbox_seq, traceparent=traceparent,
            token=step.token,
        )
        self._sender.send(self._agent_queues[definition.service], request.to_json())
        return order
