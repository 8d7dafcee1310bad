"""What an operator's resubmit does to a failed order: sends it round again, keeping every
piece of work that may still stand at a service under the key it was done with.

Pure, as the transitions in ``state`` are: the new state carries its outbox (the start command),
which the operator API writes conditionally.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from shared.domain import budget
from shared.domain.effects import SendCommand
from shared.domain.messages import CommandKind
from shared.domain.state import (
    Cause,
    CompensationState,
    IllegalTransition,
    OrderState,
    ProcessState,
    StepStatus,
)
from shared.domain.transitions import emit

MAX_HISTORY = 20


def resubmit(state: OrderState, now: datetime, pending_grace: timedelta,
             reason: str = "", force: bool = False, by: str | None = None) -> OrderState:
    """An operator sends a failed order round again, once its compensation has settled.

    Nothing is applied twice: a step keeps the key its work was done under unless that work was
    undone or refused for good (it did nothing), so work that may still stand at a service (a
    completed step, one whose undo failed, one in doubt) is never redone under a new key; asked
    again under its own key, the service answers with what it already did. A failed
    compensation leaves work standing that an operator must look at first, so resubmitting it
    needs ``force``.
    """
    if state.process_state is not ProcessState.ERROR or not state.is_settled:
        raise IllegalTransition(
            f"order {state.order_id} is {state.process_state} (compensation "
            f"{state.compensation}); only a failed order whose compensation has settled can be "
            "resubmitted"
        )
    if state.compensation is CompensationState.FAILED and not force:
        raise IllegalTransition(
            f"order {state.order_id}: its compensation failed, so some of its work may still "
            "stand at the services; check them, then resubmit with force (the standing work "
            "is kept under its key, not redone)"
        )
    undone_maybe = [s.name for s in state.steps
                    if s.status is StepStatus.COMPENSATION_FAILED and s.undo_in_doubt]
    if undone_maybe:
        raise IllegalTransition(
            f"order {state.order_id}: the undo of {', '.join(undone_maybe)} was never answered, "
            "so its work may have been undone; run again, it would be asked for under its key "
            "and answered with that work. Undo it by hand at the service if it still stands, "
            "then send the order again under a new id")
    new = state._copy(now)
    # Held to its budget by size, not only by count: an operator's reason can be any length.
    new.history = budget.newest_within([*new.history, {
        "at": now.isoformat(), "event": "resubmitted", "by": by,
        "reason": budget.clip(reason, budget.REASON_JSON), "forced": force,
        "previous_error": budget.clip_error(state.last_error),
        "failure_count": state.failure_count,
        "compensation": state.compensation.value if state.compensation else None,
        "steps": {s.name: f"{s.status.value} after {s.attempt} attempt(s)" for s in state.steps},
    }][-MAX_HISTORY:], budget.HISTORY)
    new.generation += 1
    new.index_key = None  # the store files the new generation when it writes it
    new.process_state = ProcessState.PENDING
    new.locked_by = None
    new.complete_by = now + pending_grace
    new.failure_count = 0
    new.compensation = None
    new.compensation_failure_count = 0
    new.rescues = 0
    new.last_error = None
    new.failed_step = None
    for s in new.steps:
        if s.status is StepStatus.COMPLETED:
            continue
        if s.status is StepStatus.COMPENSATED or (s.status is StepStatus.FAILED
                                                   and not s.in_doubt):
            # Undone, or refused for good (it did nothing): new work, under a new key, so
            # that a service that answers a key with its first answer is asked afresh.
            s.work_key = None
            s.result = None
            s.undo_key = None
        s.status = StepStatus.NOT_STARTED
        s.timeouts = 0  # a new run: its own attempts count afresh
        s.undo_in_doubt = False
        s.complete_by = None
        s.last_error = None
        # Anything else may still stand under its key: it is asked for again under that key,
        # and until a service says it is done, it counts as in doubt (undone if the order
        # fails again, even after a refusal).
        s.in_doubt = s.work_key is not None
    emit(new, Cause.OPERATOR, now, [], SendCommand(command=CommandKind.START,
                                                     reason="resubmitted"),
          note=f"resubmitted{' with force' if force else ''}: {reason or 'no reason given'}",
          by=by)
    return new
