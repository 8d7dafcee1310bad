"""What a state record written by an earlier release means today.

Each record carries the schema version of the release that wrote it (``SCHEMA_VERSION``; a
record with none was written before versions were recorded). Reading an older shape fills in
what that release knew but did not record, the same way every time, so the order finishes as
it would have; where a fact was never recorded and cannot be worked out, it is left unknown and
the order goes to an operator when it matters (see ``state._next_compensation``), never a guess.
The shapes and the commits that wrote them: docs/upgrades.md, tests/upgrade/fixtures.
"""

from __future__ import annotations

from shared.domain.messages import new_work_key
from shared.domain.state import SCHEMA_VERSION, OrderState, StepState, StepStatus

__all__ = ["SCHEMA_VERSION", "adopt_work_keys"]

# Statuses a step can only have reached in the generation the record is at: a resubmission set
# every step that was not completed back to not started.
_RAN_THIS_GENERATION = frozenset({
    StepStatus.RUNNING, StepStatus.FAILED, StepStatus.COMPENSATING,
    StepStatus.COMPENSATION_FAILED})


def adopt_work_keys(state: OrderState, unkeyed: set[str]) -> None:
    """Give the steps of a record without work keys (docs/upgrades.md, the first state record)
    the keys their work was done under.

    Those releases did a step's work under ``new_work_key(order, step, generation)`` of the
    generation the step ran in, and a resubmission ran every step that was not completed again
    in the new generation. So a step that ran in this generation has this generation's key. A
    completed step of a resubmitted order may have been completed in an earlier generation:
    the last resubmission's history entry tells; when it says completed, the generation is
    not recorded, the key stays unknown, and undoing the step goes to an operator.
    ``unkeyed``: the names of the steps whose stored form has no work key at all.
    """
    carried = _completed_at_last_resubmit(state)
    for step in state.steps:
        if step.name not in unkeyed or step.work_key is not None:
            continue
        if step.status is StepStatus.COMPLETED and step.name in carried:
            continue  # done in some earlier generation: its key was never recorded
        if _ran(step):
            step.work_key = new_work_key(state.order_id, step.name, state.generation)


def _ran(step: StepState) -> bool:
    if step.status is StepStatus.COMPLETED or step.status in _RAN_THIS_GENERATION:
        return True
    # Timed out and waiting for its retry: the work may stand.
    return step.status is StepStatus.NOT_STARTED and step.in_doubt


def _completed_at_last_resubmit(state: OrderState) -> set[str]:
    if state.generation == 0:
        return set()
    last = next((h for h in reversed(state.history) if h.get("event") == "resubmitted"), None)
    if last is None:  # resubmitted, but the history is gone: nothing can be said of any step
        return {s.name for s in state.steps}
    steps = last.get("steps") or {}
    return {name for name, text in steps.items() if str(text).startswith("completed")}
