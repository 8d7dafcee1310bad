"""Whether an Agent request is one the app sent for work in flight now, judged against the
order's record: the only thing that says what the Scheduler asked for.

A request on an Agent's queue can come from anyone who can write to that queue, or from a holder
of the master key through the host's admin API. The work it asks for is what a remote service
will do (charge, refund), so an Agent does it only when the record shows that step in that
phase at that attempt, under that key, with that operation. A request the app did send but the
order has moved past (a retry took over, the step finished) is stale, and dropped quietly; one
the app never sent is dropped and reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.domain.messages import Action, AgentRequest, new_work_key, undo_key
from shared.domain.state import UNDONE, CompensationState, OrderState, ProcessState, StepStatus
from shared.domain.workflow import Workflow

_SENT = {Action.DO: {StepStatus.RUNNING, StepStatus.COMPLETED, StepStatus.FAILED,
                     StepStatus.NOT_STARTED, StepStatus.COMPENSATING, StepStatus.COMPENSATED,
                     StepStatus.COMPENSATION_FAILED, StepStatus.LEARNING},
         Action.UNDO: {StepStatus.COMPENSATING, StepStatus.COMPENSATED,
                       StepStatus.COMPENSATION_FAILED, StepStatus.COMPLETED}}


class Verdict(StrEnum):
    IN_FLIGHT = "in_flight"  # do it
    STALE = "stale"  # sent by the app for an attempt or phase the order has left: drop
    FORGED = "forged"  # no request the app sent looks like it: drop, record, alert


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str = ""


def _forged(why: str) -> Judgement:
    return Judgement(Verdict.FORGED, why)


def judge(state: OrderState | None, req: AgentRequest, service: str,
          workflow: Workflow | None) -> Judgement:
    """``service``: the Agent's. ``workflow``: the record's, when this release has its version
    (a newer release's order is judged on its record alone)."""
    if state is None:
        return _forged(f"no order {req.order_id!r}")
    step = next((s for s in state.steps if s.name == req.step), None)
    if step is None:
        return _forged(f"order {req.order_id} has no step {req.step!r}")
    if workflow is not None:
        declared = workflow.step(step.name)
        if declared.service != service:
            return _forged(f"step {step.name} is the {declared.service} service's, not {service}'s")
        if req.action is Action.UNDO and declared.compensation is None:
            return _forged(f"step {step.name} has no undo")
        if req.operation != declared.operation_for(req.action.value):
            return _forged(f"step {step.name} {req.action.value}s with "
                           f"{declared.operation_for(req.action.value)!r}, not {req.operation!r}")
    if step.work_key is None:
        # A record of a release before work keys whose key is unknown: nothing can match it.
        return Judgement(Verdict.STALE, f"step {step.name} records no work key")
    keys = {step.work_key} if req.action is Action.DO else _undo_keys(step.work_key,
                                                                        step.undo_key)
    if req.idempotency_key not in keys and req.idempotency_key in _earlier_keys(state,
                                                                                step.name):
        return Judgement(Verdict.STALE, "a request of the order before it was resubmitted")
    if req.idempotency_key not in keys:
        key = step.work_key if req.action is Action.DO else (step.undo_key
                                                             or undo_key(step.work_key))
        return _forged(f"key {req.idempotency_key!r} is not the {req.action.value} key of step "
                       f"{step.name} ({key!r})")
    if req.action is Action.UNDO and req.compensates not in (None, step.work_key):
        return _forged(f"it names work {req.compensates!r}, not the step's {step.work_key!r}")
    # Work kept under its key through a resubmit (standing when the order was forced round
    # again) may have had undo requests sent for it before: a late copy is stale, not forged.
    # (Attempts count on across generations: such a copy's is at most the step's now.)
    carried = (req.action is Action.UNDO and req.attempt <= step.attempt
               and step.work_key in _earlier_do_keys(state, step.name))
    if req.action is Action.UNDO and state.process_state not in UNDONE:
        if carried:
            return Judgement(Verdict.STALE, "an undo sent before the order was resubmitted")
        # Undo requests are sent only for a failed order (an order resubmitted since names its
        # old keys: stale, above); for this one, none ever was.
        return _forged(f"order {state.order_id} is {state.process_state.value}: no undo of "
                       "it was ever sent")
    in_flight = (
        (step.status is StepStatus.RUNNING and state.process_state is ProcessState.PROCESSING)
        # A step in doubt asked again under its key, before its undo.
        or (step.status is StepStatus.LEARNING
            and state.compensation is CompensationState.RUNNING)
        if req.action is Action.DO else
        step.status is StepStatus.COMPENSATING
        and state.compensation is CompensationState.RUNNING)
    if req.attempt == step.attempt and in_flight:
        if not step.holds(req.token):
            return _forged(f"it lacks the token of {step.name}'s attempt {step.attempt}")
        if step.complete_by is not None and req.complete_by > step.complete_by:
            # A copy given more time would have the Agent work, and answer, past the step's.
            return _forged(f"its complete-by {req.complete_by.isoformat()} is past the step's "
                           f"({step.complete_by.isoformat()})")
        return Judgement(Verdict.IN_FLIGHT)
    if carried or (req.attempt <= step.attempt and step.status in _SENT[req.action]):
        return Judgement(Verdict.STALE, f"attempt {req.attempt}; the step is {step.status.value} "
                                        f"at attempt {step.attempt}")
    return _forged(f"{req.action.value} attempt {req.attempt} was never sent (the step is "
                   f"{step.status.value} at attempt {step.attempt})")


def _undo_keys(work_key: str, recorded: str | None = None) -> set[str]:
    # The recorded undo key, and the keys an undo is derived as when none is recorded,
    # "<work key>.undo" among them (docs/upgrades.md, Agent request): such a request may still
    # be queued when this release takes over (tests/upgrade/fixtures).
    return {undo_key(work_key), f"{work_key}.undo", *([recorded] if recorded else [])}


def _earlier_do_keys(state: OrderState, step: str) -> set[str]:
    return {new_work_key(state.order_id, step, g) for g in range(state.generation)}


def _earlier_keys(state: OrderState, step: str) -> set[str]:
    keys = _earlier_do_keys(state, step)
    return keys | {u for k in keys for u in _undo_keys(k)}
