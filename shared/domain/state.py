"""The state record of an order and every transition it may make.

Transitions are pure: each takes a state and returns a new one plus the events it caused, or
raises IllegalTransition. The Scheduler and the Supervisor decide *when* to call them; the state
store decides *whether* the write wins. Field names follow the design brief's contract.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from shared.domain.messages import Action, AgentReply, ReplyOutcome, StatusEvent
from shared.domain.workflow import Workflow


class IllegalTransition(Exception):
    """The transition does not apply to the state the order is in."""


class ProcessState(StrEnum):
    PENDING = "Pending"
    PROCESSING = "Processing"
    PROCESSED = "Processed"
    ERROR = "Error"


class StepStatus(StrEnum):
    NOT_STARTED = "not_started"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"


class CompensationState(StrEnum):
    PENDING = "Pending"  # requested, waiting for a Scheduler to take it
    RUNNING = "Running"
    DONE = "Done"
    FAILED = "Failed"  # gave up: an operator must finish by hand


@dataclass
class StepState:
    name: str
    status: StepStatus = StepStatus.NOT_STARTED
    attempt: int = 0
    complete_by: datetime | None = None
    last_error: str | None = None
    # The remote side may have done the work even though we never heard back (a timeout), so a
    # failed order must undo this step too. Compensations are idempotent, so undoing work that
    # never happened is harmless.
    in_doubt: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "attempt": self.attempt,
            "complete_by": self.complete_by.isoformat() if self.complete_by else None,
            "last_error": self.last_error,
            "in_doubt": self.in_doubt,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepState:
        cb = d.get("complete_by")
        return cls(
            name=d["name"],
            status=StepStatus(d["status"]),
            attempt=int(d.get("attempt", 0)),
            complete_by=datetime.fromisoformat(cb) if cb else None,
            last_error=d.get("last_error"),
            in_doubt=bool(d.get("in_doubt", False)),
        )


@dataclass(frozen=True)
class Event:
    """Something a submitter or an operator should hear about."""

    kind: StatusEvent
    step: str | None = None
    detail: str | None = None

    @property
    def is_alert(self) -> bool:
        return self.kind in ("failed", "compensation_failed")


@dataclass
class OrderState:
    order_id: str
    process_state: ProcessState
    steps: list[StepState]
    created_at: datetime
    updated_at: datetime
    locked_by: str | None = None
    complete_by: datetime | None = None
    failure_count: int = 0
    compensation: CompensationState | None = None
    compensation_failure_count: int = 0
    reply_to: str | None = None
    last_error: str | None = None
    # The step whose failure put the order in Error.
    failed_step: str | None = None
    # How often an operator resubmitted the order, and what happened before each time.
    generation: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    # The store's concurrency token (an ETag); opaque to the domain.
    version: str | None = field(default=None, compare=False)

    def step(self, name: str) -> StepState:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def current_step(self) -> StepState | None:
        for s in self.steps:
            if s.status in (StepStatus.RUNNING, StepStatus.COMPENSATING):
                return s
        return None

    @property
    def is_settled(self) -> bool:
        """Nothing more will happen to this order without an operator."""
        if self.process_state is ProcessState.PROCESSED:
            return True
        return self.process_state is ProcessState.ERROR and self.compensation in (
            CompensationState.DONE, CompensationState.FAILED,
        )

    def _copy(self, now: datetime) -> OrderState:
        new = copy.deepcopy(self)
        new.updated_at = now
        return new


@dataclass(frozen=True)
class Transition:
    state: OrderState
    events: tuple[Event, ...] = ()


@dataclass(frozen=True)
class RetryPolicy:
    failure_threshold: int
    backoff: Callable[[int], timedelta]
    # How long a Pending order may wait for a Scheduler before the Supervisor nudges one.
    pending_grace: timedelta
    # Undoing must outlast doing: give up on a compensation (and call an operator) only later.
    compensation_threshold: int = 10


def exponential_backoff(base: timedelta, cap: timedelta) -> Callable[[int], timedelta]:
    """Delay before retry number ``failures``: base, 2 x base, 4 x base, ... never above cap."""

    def delay(failures: int) -> timedelta:
        return min(cap, base * (2 ** max(0, failures - 1)))

    return delay


def new_order_state(
    order_id: str, workflow: Workflow, now: datetime, reply_to: str | None = None
) -> OrderState:
    return OrderState(
        order_id=order_id,
        process_state=ProcessState.PENDING,
        steps=[StepState(name=s.name) for s in workflow.steps],
        created_at=now,
        updated_at=now,
        reply_to=reply_to,
    )


def claim(state: OrderState, scheduler_id: str, now: datetime, workflow: Workflow) -> Transition:
    """A Scheduler takes a free Pending order and starts its next step."""
    if state.process_state is not ProcessState.PENDING or state.locked_by is not None:
        raise IllegalTransition(
            f"order {state.order_id} is {state.process_state}, locked by {state.locked_by}"
        )
    new = state._copy(now)
    new.process_state = ProcessState.PROCESSING
    new.locked_by = scheduler_id
    nxt = next((s for s in new.steps if s.status is not StepStatus.COMPLETED), None)
    if nxt is None:  # cannot happen for a Pending order, but never leave one running with no step
        raise IllegalTransition(f"order {state.order_id} has no step left to run")
    _run(new, nxt, now, workflow)
    return Transition(new)


def apply_reply(
    state: OrderState, reply: AgentReply, scheduler_id: str, now: datetime, workflow: Workflow
) -> Transition:
    """Record an Agent's reply. A reply that does not match the step's current attempt is stale."""
    try:
        step = state.step(reply.step)
    except KeyError:
        raise IllegalTransition(f"order {state.order_id} has no step {reply.step!r}") from None
    if reply.action is Action.DO:
        if (state.process_state is not ProcessState.PROCESSING
                or step.status is not StepStatus.RUNNING or step.attempt != reply.attempt):
            raise IllegalTransition(
                f"stale reply for {state.order_id}/{step.name} attempt {reply.attempt}: "
                f"order {state.process_state}, step {step.status} attempt {step.attempt}"
            )
        new = state._copy(now)
        return _after_do(new, new.step(step.name), reply, scheduler_id, now, workflow)
    if (state.process_state is not ProcessState.ERROR
            or state.compensation is not CompensationState.RUNNING
            or step.status is not StepStatus.COMPENSATING or step.attempt != reply.attempt):
        raise IllegalTransition(
            f"stale undo reply for {state.order_id}/{step.name} attempt {reply.attempt}: "
            f"compensation {state.compensation}, step {step.status} attempt {step.attempt}"
        )
    new = state._copy(now)
    step = new.step(step.name)
    step.complete_by = None
    if reply.outcome is ReplyOutcome.OK:
        step.status = StepStatus.COMPENSATED
        step.last_error = None
        events = [Event("step_compensated", step.name)]
        return _next_compensation(new, scheduler_id, now, workflow, events)
    step.status = StepStatus.COMPENSATION_FAILED
    step.last_error = reply.error
    return _give_up_compensation(new, step, reply.error or "permanent error")


def begin_compensation(
    state: OrderState, scheduler_id: str, now: datetime, workflow: Workflow
) -> Transition:
    """A Scheduler takes a requested compensation and undoes the latest step still to undo."""
    if (state.process_state is not ProcessState.ERROR
            or state.compensation is not CompensationState.PENDING):
        raise IllegalTransition(
            f"order {state.order_id} is {state.process_state}, compensation {state.compensation}"
        )
    return _next_compensation(state._copy(now), scheduler_id, now, workflow, [])


MAX_HISTORY = 20


def resubmit(state: OrderState, now: datetime, pending_grace: timedelta,
             reason: str = "") -> Transition:
    """An operator sends a failed order round again, once its compensation has settled.

    Steps that are still completed (and were not undone) stay done; every other step starts
    afresh. The counts start from zero; what happened before is kept in the history.
    """
    if state.process_state is not ProcessState.ERROR or not state.is_settled:
        raise IllegalTransition(
            f"order {state.order_id} is {state.process_state} (compensation "
            f"{state.compensation}); only a failed order whose compensation has settled can be "
            "resubmitted"
        )
    new = state._copy(now)
    new.history = [*new.history, {
        "at": now.isoformat(), "event": "resubmitted", "reason": reason,
        "previous_error": state.last_error, "failure_count": state.failure_count,
        "compensation": state.compensation.value if state.compensation else None,
        "steps": {s.name: f"{s.status.value} after {s.attempt} attempt(s)" for s in state.steps},
    }][-MAX_HISTORY:]
    new.generation += 1
    new.process_state = ProcessState.PENDING
    new.locked_by = None
    new.complete_by = now + pending_grace
    new.failure_count = 0
    new.compensation = None
    new.compensation_failure_count = 0
    new.last_error = None
    new.failed_step = None
    for s in new.steps:
        if s.status is not StepStatus.COMPLETED:
            s.status = StepStatus.NOT_STARTED
            s.complete_by = None
            s.last_error = None
            s.in_doubt = False
    return Transition(new)


def supervise(state: OrderState, now: datetime, policy: RetryPolicy) -> SupervisorDecision | None:
    """What the Supervisor should do about this order now, or None when nothing is overdue.

    Knows nothing of the business: only of states, deadlines and counts.
    """
    if state.is_settled:
        # The Scheduler drops a settled order from the index itself; step in only when it
        # evidently did not (it died first), so the two do not both delete it.
        if state.updated_at + policy.pending_grace > now:
            return None
        return SupervisorDecision(Transition(state), kind="forget")
    deadline = state.complete_by
    if state.process_state is ProcessState.PENDING and deadline is None:
        deadline = state.created_at + policy.pending_grace
    if deadline is None or deadline > now:
        return None
    new = state._copy(now)
    if state.process_state is ProcessState.PENDING:
        new.complete_by = now + policy.pending_grace
        return SupervisorDecision(
            Transition(new), command="start", reason="pending order not taken", kind="rescue"
        )
    if state.process_state is ProcessState.PROCESSING:
        return _expire_step(new, now, policy)
    if state.compensation is CompensationState.PENDING:
        new.complete_by = now + policy.pending_grace
        return SupervisorDecision(
            Transition(new), command="compensate", reason="compensation not taken", kind="rescue"
        )
    if state.compensation is CompensationState.RUNNING:
        return _expire_compensation(new, now, policy)
    return None


@dataclass(frozen=True)
class SupervisorDecision:
    transition: Transition
    command: str | None = None  # "start" or "compensate": what to ask the Scheduler
    delay: timedelta = timedelta(0)
    reason: str = ""
    # rescue: nudge a Scheduler; retry: count a failure and try again later; fail: give up;
    # forget: the order is settled, drop it from the in-flight index.
    kind: str = "retry"

    @property
    def forget(self) -> bool:
        return self.kind == "forget"


def _run(state: OrderState, step: StepState, now: datetime, workflow: Workflow) -> None:
    step.status = StepStatus.RUNNING
    step.attempt += 1
    step.complete_by = now + workflow.step(step.name).budget
    state.complete_by = step.complete_by


def _after_do(new: OrderState, step: StepState, reply: AgentReply, scheduler_id: str,
              now: datetime, workflow: Workflow) -> Transition:
    step.complete_by = None
    new.locked_by = scheduler_id
    if reply.outcome is ReplyOutcome.OK:
        step.status = StepStatus.COMPLETED
        step.last_error = None
        step.in_doubt = False
        events = [Event("step_completed", step.name)]
        nxt = next((s for s in new.steps if s.status is StepStatus.NOT_STARTED), None)
        if nxt is not None:
            _run(new, nxt, now, workflow)
            return Transition(new, tuple(events))
        new.process_state = ProcessState.PROCESSED
        new.locked_by = None
        new.complete_by = None
        events.append(Event("completed"))
        return Transition(new, tuple(events))
    # A permanent fault: the remote side refused, so nothing of this step is left to undo.
    step.status = StepStatus.FAILED
    step.in_doubt = False
    step.last_error = reply.error
    new.process_state = ProcessState.ERROR
    new.failed_step = step.name
    new.last_error = f"{step.name}: {reply.error}"
    events = [Event("failed", step.name, reply.error)]
    return _next_compensation(new, scheduler_id, now, workflow, events)


def _to_undo(state: OrderState, workflow: Workflow) -> StepState | None:
    for s in reversed(state.steps):
        if workflow.step(s.name).compensation is None:
            continue
        if s.status in (StepStatus.COMPLETED, StepStatus.COMPENSATING) or (
            s.status is StepStatus.FAILED and s.in_doubt
        ):
            return s
    return None


def _next_compensation(new: OrderState, scheduler_id: str, now: datetime, workflow: Workflow,
                       events: list[Event]) -> Transition:
    step = _to_undo(new, workflow)
    if step is None:
        new.compensation = CompensationState.DONE
        new.locked_by = None
        new.complete_by = None
        events.append(Event("compensated", detail=", ".join(
            s.name for s in new.steps if s.status is StepStatus.COMPENSATED) or "nothing to undo"))
        return Transition(new, tuple(events))
    step.status = StepStatus.COMPENSATING
    step.attempt += 1
    step.complete_by = now + workflow.step(step.name).budget
    new.compensation = CompensationState.RUNNING
    new.locked_by = scheduler_id
    new.complete_by = step.complete_by
    return Transition(new, tuple(events))


def _give_up_compensation(new: OrderState, step: StepState, why: str) -> Transition:
    new.compensation = CompensationState.FAILED
    new.locked_by = None
    new.complete_by = None
    new.last_error = f"compensation of {step.name} failed: {why}"
    return Transition(new, (Event("compensation_failed", step.name, why),))


def _expire_step(new: OrderState, now: datetime, policy: RetryPolicy) -> SupervisorDecision:
    new.failure_count += 1
    new.locked_by = None
    step = new.current_step
    why = "no step running (the Scheduler stopped before dispatch)"
    if step is not None:
        why = f"attempt {step.attempt} not done by {step.complete_by:%Y-%m-%dT%H:%M:%SZ}"
        step.last_error = f"timed out: {why}"
        step.in_doubt = True
        step.complete_by = None
    if new.failure_count < policy.failure_threshold:
        if step is not None:
            step.status = StepStatus.NOT_STARTED
        delay = policy.backoff(new.failure_count)
        new.process_state = ProcessState.PENDING
        new.complete_by = now + delay + policy.pending_grace
        return SupervisorDecision(Transition(new), command="start", delay=delay, reason=why)
    if step is not None:
        step.status = StepStatus.FAILED
    new.process_state = ProcessState.ERROR
    new.failed_step = step.name if step else None
    new.compensation = CompensationState.PENDING
    new.complete_by = now + policy.pending_grace
    new.last_error = f"gave up after {new.failure_count} failures: {why}"
    event = Event("failed", step.name if step else None, new.last_error)
    return SupervisorDecision(Transition(new, (event,)), command="compensate", reason=why,
                              kind="fail")


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
        return SupervisorDecision(Transition(new), command="compensate", delay=delay, reason=why)
    if step is not None:
        step.status = StepStatus.COMPENSATION_FAILED
        return SupervisorDecision(_give_up_compensation(new, step, why), reason=why, kind="fail")
    new.compensation = CompensationState.FAILED
    new.complete_by = None
    return SupervisorDecision(Transition(new, (Event("compensation_failed", None, why),)),
                              reason=why, kind="fail")
