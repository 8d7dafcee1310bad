"""What the Supervisor does about an overdue order: rescue it, send its step again, count a
failure and retry, or give it up (and have its done work undone).

Pure, as the transitions in ``state`` are: each decision is a new state with its outbox, which
the Supervisor writes conditionally. Knows nothing of the business: only of states, deadlines,
counts and the tick log's outages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from shared.domain.effects import SendCommand
from shared.domain.messages import CommandKind
from shared.domain.outages import TickLog
from shared.domain.pauses import LAG, NONE, PauseKind, Pauses, Target, hold, release, target_of
from shared.domain.state import (
    Cause,
    CompensationState,
    Event,
    OrderState,
    ProcessState,
    RetryPolicy,
    StepState,
    StepStatus,
    due_at,
)
from shared.domain.transitions import emit, give_up_compensation
from shared.domain.workflow import Workflow


class DecisionKind(StrEnum):
    RESCUE = "rescue"  # nobody took the order: hand it to a Scheduler again
    REDISPATCH = "redispatch"  # the step's request was never confirmed sent: send it again
    OUTAGE = "outage"  # the step's time fell in an outage: send it again, no failure counted
    RETRY = "retry"  # a step timed out: count a failure, try again after a backoff
    FAIL = "fail"  # past a threshold: give up (and undo, or call an operator)
    FORGET = "forget"  # settled: finish its effects and drop it from the due-time index
    HOLD = "hold"  # its service or workflow is paused: it waits, nothing counted, nothing sent
    RELEASE = "release"  # what held it runs again: it starts, or its step is sent again


@dataclass(frozen=True)
class SupervisorDecision:
    kind: DecisionKind
    state: OrderState
    reason: str = ""


def supervise(state: OrderState, now: datetime, policy: RetryPolicy,
              workflow: Workflow, ticks: TickLog | None = None,
              pauses: Pauses = NONE) -> SupervisorDecision | None:
    """What the Supervisor should do about this order now, or None when nothing is overdue.

    Knows nothing of the business: only of states, deadlines and counts. Time lost to the
    pipeline itself (a request never sent, an order no Scheduler took, a step whose time fell
    in an outage the tick log shows) is not the order's failure: it is counted apart, as
    rescues, and has its own threshold.
    """
    if state.is_settled:
        # The Scheduler drops a settled order from the index itself; step in only when it
        # evidently did not (it died first), so the two do not both delete it.
        if state.updated_at + policy.pending_grace > now:
            return None
        return SupervisorDecision(DecisionKind.FORGET, state, "settled")
    if state.held is not None and pauses.of(Target.parse(state.held)).running_everywhere(now):
        # What held it runs again: released at once, whatever time the hold filed it under.
        return _paused(state, now, policy, workflow, pauses)
    if due_at(state, policy.pending_grace) > now:
        return None
    paused = _paused(state, now, policy, workflow, pauses)
    if paused is not None:
        return paused
    new = state._copy(now)
    waiting_for = (CommandKind.START if state.process_state is ProcessState.PENDING
                   else CommandKind.COMPENSATE if state.compensation is CompensationState.PENDING
                   else None)
    if waiting_for is not None:
        new.rescues += 1
        if new.rescues > policy.rescue_threshold:
            return _give_up_waiting(new, now, policy)
        new.complete_by = now + policy.pending_grace
        why = f"not taken by a Scheduler (rescue {new.rescues} of {policy.rescue_threshold})"
        emit(new, Cause.SUPERVISOR, now, [], SendCommand(command=waiting_for, reason=why),
              note=why)
        return SupervisorDecision(DecisionKind.RESCUE, new, why)
    step = new.current_step
    if step is not None and new.rescues < policy.rescue_threshold:
        budget = workflow.step(step.name).budget
        gap = (ticks.gap_during(step.complete_by - budget, step.complete_by)
               if ticks is not None and step.complete_by is not None else None)
        if state.dispatch_unconfirmed or gap is not None:
            new.rescues += 1
            kind = DecisionKind.REDISPATCH if state.dispatch_unconfirmed else DecisionKind.OUTAGE
            why = (f"request for {step.name} attempt {step.attempt} never confirmed sent"
                   if gap is None else
                   f"{step.name} attempt {step.attempt} was due {gap.describe()}, not "
                   "counted as a failure")
            why += f"; sent again (rescue {new.rescues} of {policy.rescue_threshold})"
            step.complete_by = now + budget
            new.complete_by = step.complete_by
            emit(new, Cause.SUPERVISOR, now, [], note=why)
            return SupervisorDecision(kind, new, why)
    if state.process_state is ProcessState.PROCESSING:
        return _expire_step(new, now, policy, workflow)
    if state.compensation is CompensationState.RUNNING:
        return _expire_compensation(new, now, policy)
    return None


def _paused(state: OrderState, now: datetime, policy: RetryPolicy, workflow: Workflow,
            pauses: Pauses) -> SupervisorDecision | None:
    """A pause's part: hold the order while what it waits for is paused; once it runs again,
    release an order held for it, or a step whose attempt met the pause (its Agent dropped the
    request uncalled), without counting a failure or a rescue."""
    if state.compensation is CompensationState.PENDING:
        return None  # waiting for a Scheduler, not for a service
    target = target_of(state, workflow.name, {s.name: s.service for s in workflow.steps})
    if target is None:
        return None
    pause = pauses.of(target)
    if pause.paused:
        return SupervisorDecision(DecisionKind.HOLD, hold(
            state, now, now + policy.pause_recheck, target, pause.describe()), pause.describe())
    step = state.current_step
    budget = workflow.step(step.name).budget if step is not None else timedelta(0)
    if target.kind is PauseKind.SERVICE:  # its attempt's time: its Agent may have dropped it
        met = (step is not None and step.complete_by is not None
               and pause.met(step.complete_by - budget, step.complete_by))
    else:  # its time waiting to start: its start may have been refused
        met = pause.met(state.updated_at, now)
    if state.held != target.key and not met:
        return None
    if not pause.running_everywhere(now):
        # Resumed, but an instance may not know yet, and would drop it again: a little longer.
        ended = pause.ended[-1][1] + LAG
        return SupervisorDecision(DecisionKind.HOLD, hold(
            state, now, ended, target, f"{target} resumed; every instance knows by "
            f"{ended:%H:%M:%S}Z"), f"{target} resumed moments ago")
    new = release(state, now, target, budget, policy.pending_grace)
    return SupervisorDecision(DecisionKind.RELEASE, new, f"{target} resumed")


def _fail(new: OrderState, now: datetime, policy: RetryPolicy, step: StepState | None,
          why: str) -> SupervisorDecision:
    """Give the order up: it goes to Error and its done (or maybe done) work is undone."""
    for s in new.steps:
        # A step that timed out and was waiting for its retry may have done its work.
        if s.status is StepStatus.NOT_STARTED and s.in_doubt:
            s.status = StepStatus.FAILED
    if step is not None:
        step.status = StepStatus.FAILED
    new.process_state = ProcessState.ERROR
    new.failed_step = step.name if step else None
    new.compensation = CompensationState.PENDING
    new.complete_by = now + policy.pending_grace
    new.rescues = 0
    new.last_error = why
    emit(new, Cause.SUPERVISOR, now, [Event("failed", new.failed_step, why)],
          SendCommand(command=CommandKind.COMPENSATE, reason=why))
    return SupervisorDecision(DecisionKind.FAIL, new, why)


def _give_up_waiting(new: OrderState, now: datetime, policy: RetryPolicy) -> SupervisorDecision:
    tries = policy.rescue_threshold
    if new.process_state is ProcessState.PENDING:
        return _fail(new, now, policy, None,
                     f"no Scheduler took the order after {tries} rescues: see its start "
                     "commands in the poison queue, or its order row")
    why = (f"no Scheduler took the compensation after {tries} rescues: see its commands in "
           "the poison queue, or its order row")
    step = new.current_step
    if step is not None:
        step.undo_in_doubt = step.status is StepStatus.COMPENSATING
        step.status = StepStatus.COMPENSATION_FAILED
        step.complete_by = None
    emit(new, Cause.SUPERVISOR, now,
          give_up_compensation(new, step.name if step else None, why))
    return SupervisorDecision(DecisionKind.FAIL, new, why)


def _expire_step(new: OrderState, now: datetime, policy: RetryPolicy,
                 workflow: Workflow) -> SupervisorDecision:
    new.failure_count += 1
    new.locked_by = None
    step = new.current_step
    why = "no step running (the Scheduler stopped before dispatch)"
    declared = workflow.step(step.name).retry if step is not None else None
    if step is not None:
        why = f"attempt {step.attempt} not done by {step.complete_by:%Y-%m-%dT%H:%M:%SZ}"
        step.last_error = f"timed out: {why}"
        step.in_doubt = True
        step.complete_by = None
        step.timeouts += 1
    # The step's own attempts, counted for it alone, when it declares them; else the app's,
    # counted over the rest of the order (a step's own timeouts are its own business).
    theirs = sum(s.timeouts for s in new.steps
                 if workflow.step(s.name).retry.attempts is not None)
    again = (step.timeouts < declared.attempts
             if step is not None and declared is not None and declared.attempts is not None
             else new.failure_count - theirs < policy.failure_threshold)
    if again:
        if step is not None:
            step.status = StepStatus.NOT_STARTED
        own = declared.delay(step.timeouts) if step is not None and declared else None
        delay = own if own is not None else policy.backoff(new.failure_count)
        new.process_state = ProcessState.PENDING
        new.complete_by = now + delay + policy.pending_grace
        emit(new, Cause.SUPERVISOR, now, [], SendCommand(
            command=CommandKind.START, reason=why, not_before=now + delay), note=why)
        return SupervisorDecision(DecisionKind.RETRY, new, why)
    return _fail(new, now, policy, step, f"gave up after {new.failure_count} failures: {why}")


def _expire_compensation(new: OrderState, now: datetime, policy: RetryPolicy) -> SupervisorDecision:
    new.compensation_failure_count += 1
    new.locked_by = None
    step = new.current_step
    why = "compensation timed out"
    if step is not None:
        why = f"undo attempt {step.attempt} of {step.name} timed out"
        step.last_error = why
        step.complete_by = None
    if new.compensation_failure_count < policy.compensation_threshold:
        delay = policy.backoff(new.compensation_failure_count)
        new.compensation = CompensationState.PENDING
        new.complete_by = now + delay + policy.pending_grace
        emit(new, Cause.SUPERVISOR, now, [], SendCommand(
            command=CommandKind.COMPENSATE, reason=why, not_before=now + delay), note=why)
        return SupervisorDecision(DecisionKind.RETRY, new, why)
    if step is not None:
        # An undo never answered may have been done: the work may or may not stand.
        step.undo_in_doubt = step.status is StepStatus.COMPENSATING
        step.status = StepStatus.COMPENSATION_FAILED
    emit(new, Cause.SUPERVISOR, now,
          give_up_compensation(new, step.name if step else None, why))
    return SupervisorDecision(DecisionKind.FAIL, new, why)
