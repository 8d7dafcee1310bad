"""Order intake: validate, store order + state atomically, hand the order to the Scheduler."""

from __future__ import annotations

import hashlib
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
from shared.domain import senders
from shared.domain.alerts import AlertKind, OperatorAlert
from shared.domain.messages import Arrival, SchedulerCommand, StatusUpdate
from shared.domain.senders import Sender
from shared.domain.state import Cause, OrderState
from shared.domain.transitions import receive
from shared.domain.workflow import Registry
from shared.domain.workflow_message import InvalidOrder, WorkflowMessage
from shared.handlers.relay import EffectRelay, InHand

log = logging.getLogger(__name__)

# Service Bus's own limit on a message id: what the record and a status update keep of it.
MESSAGE_ID_KEPT = 128


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
               sent_at: datetime | None = None, traceparent: str | None = None,
               sender: Sender = senders.DEFAULT) -> IntakeResult:
        """Raises only for faults worth a redelivery (storage down); bad input is recorded.

        ``sent_at`` is when the message was enqueued: it orders the rejected list.
        ``traceparent``: the sender's trace context, which the order's trace continues.
        ``sender``: whose queue the message came from; the order is kept under its record id.
        """
        with tracing.span("intake", parent=traceparent, attributes={
                "messaging.message.id": message_id,
                "messaging.message.delivery_count": delivery_count}):
            result = self._handle(message_id, body, delivery_count, sent_at, sender)
            tracing.annotate(**tracing.order_attributes(result.order_id))
            tracing.outcome(result.outcome.value)
            return result

    def _handle(self, message_id: str, body: bytes, delivery_count: int,
                sent_at: datetime | None, sender: Sender) -> IntakeResult:
        now = self._clock()
        # Kept as the sender's orders are (senders.Sender.record_id): looked up the same way,
        # and never taken for another sender's message of the same id.
        kept_id = sender.record_id(message_id)
        read: WorkflowMessage | None = None  # a valid message a sender may not send as it is
        try:
            order = read = self._workflows.parse(body)
            reply_to = self._reply_queue(order, sender)
            workflow = self._workflows.get(order.workflow)
        except InvalidOrder as e:
            reason = f"from {sender}: {e}" if sender.named else str(e)
            self._rejections.record(Rejection(RejectionKind.INVALID, reason, kept_id, body,
                                              delivery_count, now, sent_at))
            log.warning("order message %s rejected: %s", message_id, reason)
            if sender.named:  # where it came from is known, whatever the body says
                self._tell(sender.status_queue, read.order_id if read else None, message_id,
                           body, now, reason)
            return IntakeResult(IntakeOutcome.INVALID, None, reason)

        record_id = sender.record_id(order.order_id)
        state = receive(record_id, workflow, now, reply_to, message_id[:MESSAGE_ID_KEPT])
        state.trace = tracing.current_traceparent()  # what the order's later work continues
        try:
            saved = self._store.create(order, state)  # indexed first: never lost to the Supervisor
        except OrderAlreadyExists as e:
            return self._seen_before(order, record_id, e.fingerprint,
                                     Rejection(RejectionKind.CONFLICT, "", kept_id, body,
                                               delivery_count, now, sent_at), sender)
        except OrderNotStorable as e:
            # The same write fails on every delivery: record it once, for an operator to see.
            reason = (f"order {record_id} is valid but storage refuses it ({e.reason}); "
                      "nothing was run")
            self._rejections.record(Rejection(RejectionKind.UNSTORABLE, reason, kept_id, body,
                                              delivery_count, now, sent_at))
            self._alerts.raise_alert(OperatorAlert(
                AlertKind.ORDER_NOT_STORABLE, record_id, reason, now,
                key=f"{record_id}.unstorable.{order.fingerprint()[:16]}"))
            log.error("order message %s not storable: %s", message_id, reason)
            if sender.named:
                self._tell(sender.status_queue, order.order_id, message_id, body, now, reason)
            return IntakeResult(IntakeOutcome.UNSTORABLE, record_id, reason)
        self._hand_on(saved, order.document())
        log.info("order %s accepted", record_id)
        return IntakeResult(IntakeOutcome.ACCEPTED, record_id)

    def _reply_queue(self, order: WorkflowMessage, sender: Sender) -> str | None:
        """Where the order's status goes: a declared sender's own queue, whatever the body
        says; the default sender's, the allowed queue its reply_to names."""
        if sender.named:
            if order.reply_to not in (None, sender.status_queue):
                raise InvalidOrder(f"reply_to: {sender}'s status goes to its own queue "
                                   f"{sender.status_queue!r}; leave reply_to out")
            return sender.status_queue
        if order.reply_to and not self._reply_allowed(order.reply_to):
            raise InvalidOrder(f"reply_to: queue {order.reply_to!r} is not one this app sends "
                               "status updates to (ReplyQueueAllowList)")
        return order.reply_to

    def _seen_before(self, order: WorkflowMessage, record_id: str, fingerprint: str | None,
                     conflict: Rejection, sender: Sender) -> IntakeResult:
        current = self._store.get_state(record_id)
        if fingerprint != order.fingerprint():
            reason = (f"order {record_id} already exists with different content; "
                      "the stored order was kept" if fingerprint else
                      f"order {record_id} has a state record but no order row; "
                      "nothing was changed")
            self._rejections.record(replace(conflict, reason=reason))
            self._alerts.raise_alert(OperatorAlert(
                AlertKind.ORDER_CONFLICT, record_id, reason, conflict.at,
                # A body of other content is a sender's: rolled up with the rest of that
                # sender's. A record without its order row is the store's fault: its own alert.
                source=(f"intake {sender.name}".strip() if fingerprint else ""),
                key=f"{record_id}.conflict.{order.fingerprint()[:16]}"))
            if sender.named:
                # Told to whoever sent the conflicting message, known by its queue. A default
                # sender's reply_to is the body's word, which may name the first order's queue:
                # a "rejected" there would be taken for that order's.
                self._tell(sender.status_queue, order.order_id, senders.own_id(conflict.message_id),
                           conflict.body, conflict.at, reason)
            return IntakeResult(IntakeOutcome.CONFLICT, record_id, reason)
        # The same order again. If the first delivery died before handing the order on, its
        # outbox is still the record's: hand it on now. If it died after the Scheduler's claim
        # (which intake's relay runs in this process) but before the claim's request was known
        # to be sent, send it: the same request again is harmless, and nothing else would send
        # it before the step's complete-by. Anything later is not intake's to repeat.
        if current is not None and current.outbox and (
                current.outbox_cause == Cause.INTAKE
                or (current.outbox_cause == Cause.START and current.dispatch_unconfirmed)):
            self._hand_on(current, order.document())
        return IntakeResult(IntakeOutcome.DUPLICATE, record_id)

    def _tell(self, queue: str, order_id: str | None, message_id: str, body: bytes,
              at: datetime, reason: str) -> None:
        """A ``rejected`` status update for a message intake did not take; every delivery of
        the same message tells it under the same event id."""
        event_id = hashlib.sha256(message_id.encode() + b"\0" + body).hexdigest()[:32]
        self._relay.tell(queue, StatusUpdate(
            order_id=order_id or "", event="rejected", at=at, event_id=event_id,
            message_id=message_id[:MESSAGE_ID_KEPT], detail=reason[:1024]))

    def _hand_on(self, state: OrderState, order: dict[str, Any]) -> None:
        carried = self._relay.carry_out(state, order, hold_command=True)
        if carried.held is not None:
            self._scheduler.take(carried.held, InHand(state, order), arrival=Arrival.HANDED_OVER)
