"""What an operator's cancel does to an order: nothing more is sent for it, and its work is
undone as a failed order's is (latest first, each once; work in doubt learned first), under a
state of its own.

Pure, as the transitions are: the new state carries its outbox (the compensate command), which
the operator API writes conditionally, so a cancel racing a reply, a Supervisor tick or another
operator ends in one state or is refused.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from shared.domain.effects import SendCommand
from shared.domain.messages import CommandKind
from shared.domain.state import (
    UNDONE,
    Cause,
    CompensationState,
    Event,
    IllegalTransition,
    OrderState,
    ProcessState,
    StepStatus,
)
from shared.domain.transitions import emit


class NotCancellable(IllegalTransition):
    """The order is past cancelling: why, in a sentence an operator can act on."""


def cancellable(state: OrderState) -> str | None:
    """Why ``state`` cannot be cancelled, or None when it can."""
    if state.process_state is ProcessState.PROCESSED:
        return (f"order {state.order_id} is Processed: a delivered order is not cancelled "
                "(undoing it is a business process, not this)")
    if state.process_state in UNDONE:
        doing = "undone" if state.is_settled else "being undone"
        return (f"order {state.order_id} is {state.process_state.value} already: its work is "
                f"{doing}; there is nothing left to cancel")
    return None


def cancel(state: OrderState, now: datetime, pending_grace: timedelta, reason: str,
           by: str | None = None) -> OrderState:
    """Stop a Pending or Processing order and have its work undone.

    A step in flight may have been done, or be done yet (its request sent, its reply not in):
    it is in doubt, and learned under its key before anything is undone. Its reply, when it
    comes, finds the order cancelled and moves nothing.
    """
    why = cancellable(state)
    if why is not None:
        raise NotCancellable(why)
    new = state._copy(now)
    for step in new.steps:
        if step.status is StepStatus.RUNNING:
            step.status = StepStatus.FAILED
            step.in_doubt = True
            step.complete_by = None
        elif step.status is StepStatus.NOT_STARTED and step.in_doubt:
            step.status = StepStatus.FAILED  # timed out, waiting for its retry
    said = f"cancelled by {by or 'an operator'}" + (f": {reason}" if reason else "")
    new.process_state = ProcessState.CANCELLED
    new.compensation = CompensationState.PENDING
    new.failed_step = None
    new.locked_by = None
    new.complete_by = now + pending_grace
    new.rescues = 0
    new.last_error = said
    if state.process_state is ProcessState.PARKED:
        new.index_key = None  # parked, it left the due-time index: the store files it again
    emit(new, Cause.OPERATOR, now, [Event("cancelled", detail=reason or None)],
         SendCommand(command=CommandKind.COMPENSATE, reason=said), note=reason or None, by=by)
    return new
