"""What an operator's resume does to a parked order (a step that needs a person: StepRetry.park,
NeedsPerson): it goes on from that step, asked again under the same key, once the person has
acted. Cancelling a parked order is a cancel like any other (cancellation.py).

Pure, as the transitions are: the new state carries its outbox (the start command), which the
operator API writes conditionally.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from shared.domain.effects import SendCommand
from shared.domain.messages import CommandKind
from shared.domain.state import Cause, IllegalTransition, OrderState, ProcessState
from shared.domain.transitions import emit


class NotParked(IllegalTransition):
    """The order is not parked: why, in a sentence an operator can act on."""


def resume_parked(state: OrderState, now: datetime, pending_grace: timedelta, reason: str,
                  by: str | None = None) -> OrderState:
    if state.process_state is not ProcessState.PARKED:
        raise NotParked(f"order {state.order_id} is {state.process_state.value}, not Parked: "
                        "only a parked order is resumed (a failed one is resubmitted)")
    new = state._copy(now)
    new.process_state = ProcessState.PENDING
    new.locked_by = None
    new.complete_by = now + pending_grace
    new.failed_step = None
    new.last_error = None
    new.rescues = 0
    new.index_key = None  # parked, it left the due-time index: the store files it again
    emit(new, Cause.OPERATOR, now, [], SendCommand(command=CommandKind.START, reason="resumed"),
         note=f"resumed: {reason or 'no reason given'}", by=by)
    return new
