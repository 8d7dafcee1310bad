"""Order intake: validate, store order + state atomically, hand the order to the Scheduler."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from shared.adapters.alerts import ORDER_CONFLICT, AlertSink, OperatorAlert
from shared.adapters.queues import MessageSender
from shared.adapters.rejections import CONFLICT, INVALID, Rejection, TableRejectionStore
from shared.adapters.state_store import OrderAlreadyExists, TableOrderStore
from shared.clock import Clock
from shared.domain.messages import CommandKind, SchedulerCommand, StatusUpdate
from shared.domain.order import InvalidOrder, parse_order
from shared.domain.state import ProcessState, new_order_state
from shared.domain.workflow import Workflow
from shared.handlers.notify import Notifier

log = logging.getLogger(__name__)


class IntakeOutcome(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    INVALID = "invalid"


@dataclass(frozen=True)
class IntakeResult:
    outcome: IntakeOutcome
    order_id: str | None = None
    reason: str = ""


class IntakeHandler:
    def __init__(self, *, store: TableOrderStore, rejections: TableRejectionStore,
                 alerts: AlertSink, sender: MessageSender, notifier: Notifier,
                 workflow: Workflow, scheduler_queue: str, reply_allowed: Callable[[str], bool],
                 clock: Clock) -> None:
        self._store = store
        self._rejections = rejections
        self._alerts = alerts
        self._sender = sender
        self._notifier = notifier
        self._workflow = workflow
        self._scheduler_queue = scheduler_queue
        self._reply_allowed = reply_allowed
        self._clock = clock

    def handle(self, message_id: str, body: bytes, delivery_count: int = 1) -> IntakeResult:
        """Raises only for faults worth a redelivery (storage down); bad input is recorded."""
        now = self._clock()
        try:
            order = parse_order(body)
            if order.reply_to and not self._reply_allowed(order.reply_to):
                raise InvalidOrder(f"reply_to: queue {order.reply_to!r} is not on the allow-list")
        except InvalidOrder as e:
            reason = str(e)
            self._rejections.record(Rejection(INVALID, reason, message_id, body, delivery_count,
                                              now))
            log.warning("order message %s rejected: %s", message_id, reason)
            return IntakeResult(IntakeOutcome.INVALID, None, reason)

        state = new_order_state(order.order_id, self._workflow, now, order.reply_to)
        try:
            self._store.create(order, state)
            outcome = IntakeOutcome.ACCEPTED
        except OrderAlreadyExists as e:
            if e.fingerprint != order.fingerprint():
                reason = (f"order {order.order_id} already exists with different content; "
                          "the stored order was kept")
                self._rejections.record(Rejection(CONFLICT, reason, message_id, body,
                                                  delivery_count, now))
                self._alerts.raise_alert(OperatorAlert(ORDER_CONFLICT, order.order_id, reason, now))
                return IntakeResult(IntakeOutcome.CONFLICT, order.order_id, reason)
            # The same order again: a redelivery. If the first delivery died before handing the
            # order on, it is still Pending and must be handed on now; otherwise nothing to do.
            current = self._store.get_state(order.order_id)
            if current is None or current.process_state is not ProcessState.PENDING:
                return IntakeResult(IntakeOutcome.DUPLICATE, order.order_id)
            outcome = IntakeOutcome.DUPLICATE

        self._sender.send(self._scheduler_queue, SchedulerCommand(
            kind=CommandKind.START, order_id=order.order_id, reason="received").to_json())
        if order.reply_to and outcome is IntakeOutcome.ACCEPTED:
            self._notifier.status(order.reply_to, StatusUpdate(
                order_id=order.order_id, event="received", at=now))
        log.info("order %s %s", order.order_id, outcome.value)
        return IntakeResult(outcome, order.order_id)
