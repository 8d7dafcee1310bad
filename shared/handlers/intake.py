"""Order intake: validate, store order + state atomically, hand the order to the Scheduler."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from shared import tracing
from shared.adapters.alerts import AlertSink
from shared.adapters.rejections import Rejection, RejectionKind, RejectionStore
from shared.adapters.state_store import OrderAlreadyExists, OrderNotStorable, OrderStore
from shared.clock import Clock
from shared.domain.alerts import AlertKind, OperatorAlert
from shared.domain.messages import Arrival, SchedulerCommand
from shared.domain.state import Cause, OrderState
from shared.domain.transitions import receive
from shared.domain.workflow import Registry
from shared.domain.workflow_message import InvalidOrder, WorkflowMessage
from shared.handlers.relay import EffectRelay, InHand

log = logging.getLogger(__name__)


class IntakeOutcome(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    INVALID = "invalid"
    UNSTORABLE = "unstorable"


@dataclass(frozen=True)
class IntakeResult:
    outcome: IntakeOutcome
    order_id: str | None = None
    reason: str = ""


class CommandTaker(Protocol):
    """The Scheduler, as intake hands it the start command in this process."""

    def take(self, cmd: SchedulerCommand, known: InHand | None = None, *,
             arrival: Arrival = Arrival.QUEUED) -> object: ...


class IntakeHandler:
    """``scheduler``: takes the start command in this invocation (EffectRelay.carry_out's
    ``hold_command``): the Service Bus message, redelivered until intake returns, keeps it."""

    def __init__(self, *, store: OrderStore, rejections: RejectionStore, alerts: AlertSink,
                 relay: EffectRelay, scheduler: CommandTaker, workflows: Registry,
                 reply_allowed: Callable[[str], bool], clock: Clock) -> None:
        self._store = store
        self._rejections = rejections
        self._alerts = alerts
        self._relay = relay
        self._scheduler = scheduler
        self._workflows = workflows
        self._reply_allowed = reply_allowed
        self._clock = clock

    def handle(self, message_id: str, body: bytes, delivery_count: int = 1,
               sent_at: datetime | None = None, traceparent: str | None = None) -> IntakeResult:
        """Raises only for faults worth a redelivery (storage down); bad input is recorded.

        ``sent_at`` is when the message was enqueued: it orders the rejected list.
        ``traceparent``: the sender's trace context, which the order's trace continues.
        """
        with tracing.span("intake", parent=traceparent, attributes={
                "messaging.message.id": message_id,
                "messaging.message.delivery_count": delivery_count}):
            result = self._handle(message_id, body, delivery_count, sent_at)
            tracing.annotate(**tracing.order_attributes(result.order_id))
            tracing.outcome(result.outcome.value)
            return result

    def _handle(self, message_id: str, body: bytes, delivery_count: int,
                sent_at: datetime | None) -> IntakeResult:
        now = self._clock()
        try:
            order = self._workflows.parse(body)
            if order.reply_to and not self._reply_allowed(order.reply_to):
                raise InvalidOrder(f"reply_to: queue {order.reply_to!r} is not one this app sends "
                                   "status updates to (ReplyQueueAllowList)")
            workflow = self._workflows.get(order.workflow)
        except InvalidOrder as e:
            reason = str(e)
            self._rejections.record(Rejection(RejectionKind.INVALID, reason, message_id, body,
                                              delivery_count, now, sent_at))
            log.warning("order message %s rejected: %s", message_id, reason)
            return IntakeResult(IntakeOutcome.INVALID, None, reason)

        state = receive(order.order_id, workflow, now, order.reply_to)
        state.trace = tracing.current_traceparent()  # what the order's later work continues
        try:
            saved = self._store.create(order, state)  # indexed first: never lost to the Supervisor
        except OrderAlreadyExists as e:
            return self._seen_before(order, e.fingerprint,
                                     Rejection(RejectionKind.CONFLICT, "", message_id, body,
                                               delivery_count, now, sent_at))
        except OrderNotStorable as e:
            # The same write fails on every delivery: record it once, for an operator to see.
            reason = (f"order {order.order_id} is valid but storage refuses it ({e.reason}); "
                      "nothing was run")
            self._rejections.record(Rejection(RejectionKind.UNSTORABLE, reason, message_id, body,
                                              delivery_count, now, sent_at))
            self._alerts.raise_alert(OperatorAlert(
                AlertKind.ORDER_NOT_STORABLE, order.order_id, reason, now,
                key=f"{order.order_id}.unstorable.{order.fingerprint()[:16]}"))
            log.error("order message %s not storable: %s", message_id, reason)
            return IntakeResult(IntakeOutcome.UNSTORABLE, order.order_id, reason)
        self._hand_on(saved, order.document())
        log.info("order %s accepted", order.order_id)
        return IntakeResult(IntakeOutcome.ACCEPTED, order.order_id)

    def _seen_before(self, order: WorkflowMessage, fingerprint: str | None,
                     conflict: Rejection) -> IntakeResult:
        current = self._store.get_state(order.order_id)
        if fingerprint != order.fingerprint():
            reason = (f"order {order.order_id} already exists with different content; "
                      "the stored order was kept" if fingerprint else
                      f"order {order.order_id} has a state record but no order row; "
                      "nothing was changed")
            self._rejections.record(replace(conflict, reason=reason))
            self._alerts.raise_alert(OperatorAlert(
                AlertKind.ORDER_CONFLICT, order.order_id, reason, conflict.at,
                # A body of other content is a sender's: rolled up with the rest. A record
                # without its order row is the store's fault: an alert of its own.
                source="intake" if fingerprint else "",
                key=f"{order.order_id}.conflict.{order.fingerprint()[:16]}"))
            return IntakeResult(IntakeOutcome.CONFLICT, order.order_id, reason)
        # The same order again. If the first delivery died before handing the order on, its
        # outbox is still the record's: hand it on now. If it died after the Scheduler's claim
        # (which intake's relay runs in this process) but before the claim's request was known
        # to be sent, send it: the same request again is harmless, and nothing else would send
        # it before the step's complete-by. Anything later is not intake's to repeat.
        if current is not None and current.outbox and (
                current.outbox_cause == Cause.INTAKE
                or (current.outbox_cause == Cause.START and current.dispatch_unconfirmed)):
            self._hand_on(current, order.document())
        return IntakeResult(IntakeOutcome.DUPLICATE, order.order_id)

    def _hand_on(self, state: OrderState, order: dict[str, Any]) -> None:
        carried = self._relay.carry_out(state, order, hold_command=True)
        if carried.held is not None:
            self._scheduler.take(carried.held, InHand(state, order), arrival=Arrival.HANDED_OVER)
