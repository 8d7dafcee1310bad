"""The state record of an order and every transition it may make.

Transitions are pure: each takes a state and returns a new one, or raises IllegalTransition. The
new state carries its outbox: the effects the transition causes (alerts, status, commands, the
dispatch of a step, leaving the due-time index), written in the same conditional write, so
nothing that follows a committed transition can be lost (see ``effects``). The Scheduler and the
Supervisor decide *when* to call them; the state store decides *whether* the write wins. Field
names follow the design brief's contract.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from shared.domain import budget
from shared.domain.alerts import AlertKind
from shared.domain.effects import (
    Dispatch,
    Effect,
    Forget,
    RaiseAlert,
    SendCommand,
    SendStatus,
    carried_within_budget,
    has_dispatch,
)
from shared.domain.messages import (
    Action,
    AgentReply,
    CommandKind,
    ReplyOutcome,
    StatusEvent,
    new_token,
    new_work_key,
    undo_key,
)
from shared.domain.workflow import Workflow


class IllegalTransition(Exception):
    """The transition does not apply to the state the order is in."""


class ForgedReply(IllegalTransition):
    """A reply to the step's attempt in flight that does not carry that attempt's token: the app
    never sent the request it answers. Refused like a stale reply, and an operator is told."""

    def __init__(self, message: str, step: str, attempt_due: datetime | None) -> None:
        super().__init__(message)
        self.step = step
        # The attempt's complete-by: the same for every copy of the reply, so the alert is one.
        self.attempt_due = attempt_due


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
    # In doubt, being asked again under its key to learn what it did, before it is undone.
    LEARNING = "learning"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"


class CompensationState(StrEnum):
    PENDING = "Pending"  # requested, waiting for a Scheduler to take it
    RUNNING = "Running"
    DONE = "Done"
    FAILED = "Failed"  # gave up: an operator must finish by hand


class Cause(StrEnum):
    """What made the last transition; a redelivered message finishes its own outbox."""

    INTAKE = "intake"
    START = "start"
    COMPENSATE = "compensate"
    SUPERVISOR = "supervisor"
    OPERATOR = "operator"


def reply_cause(reply: AgentReply) -> str:
    return f"reply:{reply.step}:{reply.action.value}:{reply.attempt}"


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
    # The key the step's work is done under, recorded when it first runs; its undo names it.
    work_key: str | None = None
    # This attempt's token (messages.new_token), sent in its request; a reply must echo it. None
    # on a step last sent by a release before it: its reply is taken as before.
    token: str | None = None
    # What its service answered when the work was done (a charge's id, say): handed to the
    # later steps and to its own undo. None: not done, or done by a release that kept none.
    result: dict[str, Any] | None = None
    # The key its undo is done under, chosen once when the undo is first sent.
    undo_key: str | None = None
    # Its undo was given up unanswered (timed out): the work may or may not have been undone.
    undo_in_doubt: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "attempt": self.attempt,
            "complete_by": self.complete_by.isoformat() if self.complete_by else None,
            "last_error": self.last_error,
            "in_doubt": self.in_doubt,
            "work_key": self.work_key,
            "token": self.token,
            **({"result": self.result} if self.result is not None else {}),
            **({"undo_key": self.undo_key} if self.undo_key is not None else {}),
            **({"undo_in_doubt": True} if self.undo_in_doubt else {}),
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
            work_key=d.get("work_key"),
            token=d.get("token"),
            result=d["result"] if isinstance(d.get("result"), dict) else None,
            undo_key=d.get("undo_key"),
            undo_in_doubt=bool(d.get("undo_in_doubt", False)),
        )


@dataclass(frozen=True)
class Event:
    """Something a submitter or an operator should hear about."""

    kind: StatusEvent
    step: str | None = None
    detail: str | None = None


# What a submitter's status update says of a failure: its category, never a remote service's
# error text (which may carry another party's data, or the service's internals). The record,
# its timeline and the operator's alert keep the whole text.
_FOR_SUBMITTER: dict[str, str] = {
    "failed": "the step could not be done; what was done before it is being undone",
    "compensation_failed": "the step could not be undone; an operator has been alerted",
}

_ALERTS: dict[str, AlertKind] = {
    "failed": AlertKind.ORDER_FAILED,
    "compensation_failed": AlertKind.COMPENSATION_FAILED,
}


# The shapes of the record this release writes (shared/domain/legacy.py reads the older ones).
# 2: steps record their work key (and, read by this release, their result and undo key); the
# record names its schema version. 3: a step may be learning (StepStatus.LEARNING), which a
# release of shape 2 cannot read: it leaves such a record to this one.
SCHEMA_VERSION = 3


def schema_of(state: OrderState) -> int:
    """The shape ``state`` is written in: the oldest that holds it, so that the release before
    this one, running beside it, still reads every record it can run."""
    return 3 if any(s.status is StepStatus.LEARNING for s in state.steps) else 2


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
    # What happened to the order, oldest first, held to budget.TIMELINE (newest kept): each
    # transition's cause, events, dispatch and the reason the Supervisor or an operator gave.
    timeline: list[dict[str, Any]] = field(default_factory=list)
    # The effects of the last transition not yet known to be carried out (see effects.py).
    outbox: list[Effect] = field(default_factory=list)
    outbox_seq: int = 0
    outbox_cause: str | None = None
    # Times the Supervisor had to hand the order on again with no progress in between.
    rescues: int = 0
    # The order's W3C trace context, recorded at intake: what the Supervisor continues.
    trace: str | None = None
    # The due-time index entry this record names (due_index.py); the store's, except that a new
    # generation has none yet.
    index_key: str | None = None
    # The workflow the order follows, and the version of it the order started with (kept for
    # the order's life). None: a record from before workflows were named, of the default one.
    workflow: str | None = None
    workflow_version: int = 1
    # The schema version its record was read with (None: read without one, or not read yet).
    # Above SCHEMA_VERSION, a newer release wrote it, for rules this release may not know: it is
    # left to that release (Registry.of_record), as an order of a workflow version it lacks is.
    schema_version: int | None = field(default=None, compare=False)
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
            if s.status in (StepStatus.RUNNING, StepStatus.COMPENSATING, StepStatus.LEARNING):
                return s
        return None

    @property
    def is_settled(self) -> bool:
        """Nothing more will happen to this order without an operator."""
        return settled(self.process_state, self.compensation)

    @property
    def from_newer_release(self) -> bool:
        return self.schema_version is not None and self.schema_version > SCHEMA_VERSION

    @property
    def dispatch_unconfirmed(self) -> bool:
        """The record cannot show that its step's request was ever sent."""
        return has_dispatch(self.outbox)

    def _copy(self, now: datetime) -> OrderState:
        new = copy.deepcopy(self)
        new.updated_at = now
        return new


def settled(process_state: ProcessState, compensation: CompensationState | None) -> bool:
    """Whether an order in this state and compensation state is settled (OrderState.is_settled),
    for a reader that has only these two columns."""
    if process_state is ProcessState.PROCESSED:
        return True
    return process_state is ProcessState.ERROR and compensation in (
        CompensationState.DONE, CompensationState.FAILED)


@dataclass(frozen=True)
class Transition:
    state: OrderState


@dataclass(frozen=True)
class RetryPolicy:
    failure_threshold: int
    backoff: Callable[[int], timedelta]
    # How long a Pending order may wait for a Scheduler before the Supervisor nudges one.
    pending_grace: timedelta
    # Undoing must outlast doing: give up on a compensation (and call an operator) only later.
    compensation_threshold: int = 10
    # Hand an order to a Scheduler this often with no progress, then give up and alert.
    rescue_threshold: int = 5
    # Longer than this between two completed Supervisor ticks, nothing could make progress.
    outage_gap: timedelta = timedelta(seconds=75)
    # Recoveries one tick carries out; the rest wait for the next, so that after an outage the
    # recovery does not itself overload the store.
    max_recoveries_per_tick: int = 200
    # How long a record the Supervisor cannot read is filed aside before it is read again.
    unreadable_recheck: timedelta = timedelta(minutes=15)


def exponential_backoff(base: timedelta, cap: timedelta) -> Callable[[int], timedelta]:
    """Delay before retry number ``failures``: base, 2 x base, 4 x base, ... never above cap."""

    def delay(failures: int) -> timedelta:
        grown: timedelta = base * (2 ** max(0, failures - 1))
        return min(cap, grown)

    return delay


def receive(order_id: str, workflow: Workflow, now: datetime,
            reply_to: str | None = None) -> OrderState:
    """A new order's first state: Pending, with a start command (and "received") to send."""
    # CompleteBy stays null, as the contract says; the Supervisor allows it the pending grace
    # from CreatedAt.
    state = OrderState(
        order_id=order_id,
        process_state=ProcessState.PENDING,
        steps=[StepState(name=s.name) for s in workflow.steps],
        created_at=now,
        updated_at=now,
        reply_to=reply_to,
        workflow=workflow.name,
        workflow_version=workflow.version,
    )
    emit(state, Cause.INTAKE, now, [Event("received")], SendCommand(
        command=CommandKind.START, reason="received"))
    return state


@dataclass(frozen=True)
class Delivery:
    """How the message a transition follows came, which says how much of the outbox it replaces
    was carried out (``emit``). ``outbox_seq``: the outbox that sent it, when it says;
    ``vouched``: its word is taken for the alerts too (the relay that carried that outbox out
    handed it over in this process, or a reply held to its request's token first)."""
    outbox_seq: int | None = None
    vouched: bool = False

    def carried(self, state: OrderState) -> bool:
        """Whether it came from ``state``'s outbox, carried out before it was sent."""
        return self.outbox_seq is not None and self.outbox_seq == state.outbox_seq


# A transition no message of the outbox it replaces caused (the Supervisor's, an operator's).
UNPROVEN = Delivery()


def claim(state: OrderState, scheduler_id: str, now: datetime, workflow: Workflow,
          delivery: Delivery = UNPROVEN) -> Transition:
    """A Scheduler takes a free Pending order and starts its next step; ``delivery``: how its
    start command came."""
    if state.process_state is not ProcessState.PENDING or state.locked_by is not None:
        raise IllegalTransition(
            f"order {state.order_id} is {state.process_state}, locked by {state.locked_by}"
        )
    new = state._copy(now)
    new.process_state = ProcessState.PROCESSING
    new.locked_by = scheduler_id
    new.rescues = 0
    nxt = next((s for s in new.steps if s.status is not StepStatus.COMPLETED), None)
    if nxt is None:  # cannot happen for a Pending order, but never leave one running with no step
        raise IllegalTransition(f"order {state.order_id} has no step left to run")
    _run(new, nxt, now, workflow)
    emit(new, Cause.START, now, [], delivery=delivery)
    return Transition(new)


def _check_token(state: OrderState, step: StepState, reply: AgentReply) -> None:
    if step.token is not None and reply.token != step.token:
        raise ForgedReply(
            f"a {reply.action.value} reply for {state.order_id}/{step.name} attempt "
            f"{reply.attempt} without the token of the request the app sent: refused, the "
            "step waits for its own reply", step.name, step.complete_by)


def apply_reply(
    state: OrderState, reply: AgentReply, scheduler_id: str, now: datetime, workflow: Workflow
) -> Transition:
    """Record an Agent's reply. A reply that does not match the step's current attempt is stale."""
    try:
        step = state.step(reply.step)
    except KeyError:
        raise IllegalTransition(f"order {state.order_id} has no step {reply.step!r}") from None
    if reply.action is Action.DO and step.status is StepStatus.LEARNING:
        if (state.compensation is not CompensationState.RUNNING
                or step.attempt != reply.attempt):
            raise IllegalTransition(
                f"stale reply for {state.order_id}/{step.name} attempt {reply.attempt}: "
                f"compensation {state.compensation}, step learning at attempt {step.attempt}")
        _check_token(state, step, reply)
        new = state._copy(now)
        new.rescues = 0
        events, note = _after_learning(new, new.step(step.name), reply, scheduler_id, now,
                                       workflow)
        emit(new, reply_cause(reply), now, events, delivery=_replied(reply), note=note)
        return Transition(new)
    if reply.action is Action.DO:
        if (state.process_state is not ProcessState.PROCESSING
                or step.status is not StepStatus.RUNNING or step.attempt != reply.attempt):
            raise IllegalTransition(
                f"stale reply for {state.order_id}/{step.name} attempt {reply.attempt}: "
                f"order {state.process_state}, step {step.status} attempt {step.attempt}"
            )
        _check_token(state, step, reply)
        new = state._copy(now)
        new.rescues = 0
        events = _after_do(new, new.step(step.name), reply, scheduler_id, now, workflow)
        emit(new, reply_cause(reply), now, events, delivery=_replied(reply))
        return Transition(new)
    if (state.process_state is not ProcessState.ERROR
            or state.compensation is not CompensationState.RUNNING
            or step.status is not StepStatus.COMPENSATING or step.attempt != reply.attempt):
        raise IllegalTransition(
            f"stale undo reply for {state.order_id}/{step.name} attempt {reply.attempt}: "
            f"compensation {state.compensation}, step {step.status} attempt {step.attempt}"
        )
    _check_token(state, step, reply)
    new = state._copy(now)
    new.rescues = 0
    step = new.step(step.name)
    step.complete_by = None
    if reply.outcome is ReplyOutcome.OK:
        step.status = StepStatus.COMPENSATED  # its last error stays: why it was undone
        events = _next_compensation(new, scheduler_id, now, workflow,
                                    [Event("step_compensated", step.name)])
    else:
        error = budget.clip_error(reply.error) or "permanent error"
        step.status = StepStatus.COMPENSATION_FAILED
        step.last_error = error
        events = give_up_compensation(new, step.name, error)
    emit(new, reply_cause(reply), now, events, delivery=_replied(reply))
    return Transition(new)


def _replied(reply: AgentReply) -> Delivery:
    # Held to its attempt's token before any transition (_check_token): its word is taken.
    return Delivery(reply.outbox_seq, vouched=True)


def begin_compensation(state: OrderState, scheduler_id: str, now: datetime, workflow: Workflow,
                       delivery: Delivery = UNPROVEN) -> Transition:
    """A Scheduler takes a requested compensation and undoes the latest step still to undo;
    ``delivery``: how its command came."""
    if (state.process_state is not ProcessState.ERROR
            or state.compensation is not CompensationState.PENDING):
        raise IllegalTransition(
            f"order {state.order_id} is {state.process_state}, compensation {state.compensation}"
        )
    new = state._copy(now)
    new.rescues = 0
    emit(new, Cause.COMPENSATE, now, _next_compensation(new, scheduler_id, now, workflow, []),
         delivery=delivery)
    return Transition(new)


def due_at(state: OrderState, pending_grace: timedelta) -> datetime:
    """When the Supervisor steps in, unless the order moves first (a new order has no
    complete-by time yet: it is due a grace period after it arrived)."""
    return state.complete_by or state.created_at + pending_grace


def _run(state: OrderState, step: StepState, now: datetime, workflow: Workflow) -> None:
    step.status = StepStatus.RUNNING
    step.attempt += 1
    step.token = new_token()
    step.complete_by = now + workflow.step(step.name).budget
    if step.work_key is None:
        step.work_key = new_work_key(state.order_id, step.name, state.generation)
    state.complete_by = step.complete_by


def emit(new: OrderState, cause: str, now: datetime, events: list[Event],
         command: SendCommand | None = None, *, delivery: Delivery = UNPROVEN,
         note: str | None = None, by: str | None = None) -> None:
    """Write the transition's outbox: alerts, status, command, dispatch, forget, in that order.

    The outbox it replaces may not have been carried out. Only a message that outbox sent (a
    command or a reply carrying its sequence number: ``delivery``) shows that its alerts and
    status went, since they go first; otherwise they are carried forward, under their own keys.
    A command from a queue (not ``vouched``) is taken at its word for the statuses but not the
    alerts: its number is a small count anyone who can write to the queue could guess, and an
    alert dropped on a made-up command's word would never reach an operator. Carried again, an
    alert is one row all the same.
    """
    kept: list[Effect] = [e for e in new.outbox if isinstance(e, RaiseAlert | SendStatus)]
    carried: list[Effect] = (kept if not delivery.carried(new) else [] if delivery.vouched
                             else [e for e in kept if isinstance(e, RaiseAlert)])
    new.outbox_seq += 1
    prefix = f"{new.order_id}.{new.outbox_seq}"
    alerts: list[Effect] = [
        RaiseAlert(alert=_ALERTS[e.kind], reason=e.detail or e.kind, at=now,
                   key=f"{prefix}.{i}", step=e.step)
        for i, e in enumerate(events) if e.kind in _ALERTS
    ]
    statuses: list[Effect] = [
        SendStatus(event=e.kind, at=now, id=f"{prefix}.{i}", step=e.step,
                   detail=_FOR_SUBMITTER.get(e.kind, e.detail))
        for i, e in enumerate(events)] if new.reply_to else []
    fresh: list[Effect] = [*alerts, *statuses, *([command] if command is not None else [])]
    carried = carried_within_budget(carried, fresh)
    effects = [*(e for e in carried if isinstance(e, RaiseAlert)), *alerts,
               *(e for e in carried if isinstance(e, SendStatus)), *statuses]
    if command is not None:
        effects.append(command)
    _finish(new, cause, effects)
    _record(new, cause, now, events, note, by)


def _record(new: OrderState, cause: str, now: datetime, events: list[Event],
            note: str | None, by: str | None) -> None:
    """Add the transition to the order's timeline."""
    at = now.isoformat()
    entries: list[dict[str, Any]] = []
    if note is not None:
        entries.append({"at": at, "cause": cause, "event": "note",
                        "detail": budget.clip(note, budget.ERROR_TEXT), "by": by})
    entries += [{"at": at, "cause": cause, "event": e.kind, "step": e.step,
                 "detail": e.detail} for e in events]
    entries += [{"at": at, "cause": cause, "event": f"{d.action.value} sent", "step": d.step,
                 "attempt": d.attempt} for d in new.outbox if isinstance(d, Dispatch)]
    if not entries:  # a claim with nothing else to say, say
        entries.append({"at": at, "cause": cause, "event": new.process_state.value})
    compact = [{k: v for k, v in e.items() if v is not None} for e in entries]
    new.timeline = budget.newest_within([*new.timeline, *compact], budget.TIMELINE)


def _finish(new: OrderState, cause: str, effects: list[Effect]) -> None:
    step = new.current_step
    if step is not None and step.complete_by is not None:
        action = Action.UNDO if step.status is StepStatus.COMPENSATING else Action.DO
        effects.append(Dispatch(step=step.name, action=action, attempt=step.attempt))
    if new.is_settled:
        effects.append(Forget(generation=new.generation))
    new.outbox = effects
    new.outbox_cause = cause


def _take_answer(new: OrderState, step: StepState, reply: AgentReply, scheduler_id: str,
                 workflow: Workflow) -> tuple[bool, str | None]:
    """A do's answer: the step's time stops and this Scheduler holds the order. True when the
    step completed with a result the record keeps; else False and why its answer cannot be
    kept (None: it was refused)."""
    step.complete_by = None
    new.locked_by = scheduler_id
    kept, unkept = _kept_result(reply, workflow.result_budget(step.name))
    if reply.outcome is ReplyOutcome.OK and unkept is None:
        step.status = StepStatus.COMPLETED
        step.in_doubt = False
        step.result = kept
        return True, None
    return False, unkept


def _after_do(new: OrderState, step: StepState, reply: AgentReply, scheduler_id: str,
              now: datetime, workflow: Workflow) -> list[Event]:
    done, unkept = _take_answer(new, step, reply, scheduler_id, workflow)
    if done:
        step.last_error = None
        events = [Event("step_completed", step.name)]
        nxt = next((s for s in new.steps if s.status is StepStatus.NOT_STARTED), None)
        if nxt is not None:
            _run(new, nxt, now, workflow)
            return events
        new.process_state = ProcessState.PROCESSED
        new.locked_by = None
        new.complete_by = None
        return [*events, Event("completed")]
    # Refused for good: the service did nothing under this key (it answers a repeat with the
    # same refusal), so there is nothing to undo, unless its answer was done work that could
    # not be kept (unkept): then it is in doubt, and undone after it is learned.
    error = budget.clip_error(unkept or reply.error)
    step.status = StepStatus.FAILED
    step.in_doubt = unkept is not None or reply.result is not None or reply.in_doubt
    step.last_error = error
    new.process_state = ProcessState.ERROR
    new.failed_step = step.name
    new.last_error = f"{step.name}: {error}"
    return _next_compensation(new, scheduler_id, now, workflow,
                              [Event("failed", step.name, error)])


def _kept_result(reply: AgentReply, limit: int) -> tuple[dict[str, Any] | None, str | None]:
    """The reply's result as the record keeps it, or why it cannot be kept (never in part)."""
    if reply.outcome is not ReplyOutcome.OK or reply.result is None:
        return None, None
    try:
        size = budget.json_bytes(reply.result)
    except (ValueError, RecursionError):
        return None, "the service's answer holds text a record cannot keep"
    if size > limit:
        return None, (f"the service's answer is {size:,} bytes of JSON; the step keeps at most "
                      f"{limit:,} (Step(result_budget=...)): its work is undone after it is "
                      "asked again under its key")
    return reply.result, None


def _to_undo(state: OrderState, workflow: Workflow) -> StepState | None:
    """The latest step whose work may stand: done, being undone or learned, or in doubt (timed
    out, or done with an answer that could not be kept). A step refused for good did nothing:
    a service answers a repeat of its key with its first answer, so no other attempt under the
    key did the work either."""
    for s in reversed(state.steps):
        if workflow.step(s.name).compensation is None:
            continue
        if s.status in (StepStatus.COMPLETED, StepStatus.COMPENSATING, StepStatus.LEARNING):
            return s
        if s.in_doubt and s.status in (StepStatus.FAILED, StepStatus.NOT_STARTED):
            return s
    return None


def _after_learning(new: OrderState, step: StepState, reply: AgentReply, scheduler_id: str,
                    now: datetime, workflow: Workflow) -> tuple[list[Event], str]:
    """A step in doubt asked again under its key: its answer is what its undo needs; a refusal
    for good means it did nothing, and there is nothing to undo."""
    done, unkept = _take_answer(new, step, reply, scheduler_id, workflow)
    if done:
        note = f"{step.name}: learned what its work did (asked again under its key); undoing it"
        return _next_compensation(new, scheduler_id, now, workflow, []), note
    if unkept is not None or reply.result is not None:
        why = (f"its work stands but its answer cannot be kept ({unkept or reply.error}): "
               "undo it at the service by hand")
        step.status = StepStatus.COMPENSATION_FAILED
        step.last_error = budget.clip(why, budget.ERROR_TEXT)
        return give_up_compensation(new, step.name, step.last_error), why
    step.status = StepStatus.FAILED
    step.in_doubt = False
    step.last_error = budget.clip(f"asked again under its key, refused: nothing to undo "
                                  f"({reply.error or 'permanent error'})", budget.ERROR_TEXT)
    note = f"{step.name}: refused when asked again under its key, so it did nothing to undo"
    return _next_compensation(new, scheduler_id, now, workflow, []), note


UNKNOWN_WORK_KEY = (
    "the key its work was done under was never recorded (a record of a release before work "
    "keys, completed in an earlier generation): check the service for this order's work, undo "
    "it by hand, then resubmit with force")


def _next_compensation(new: OrderState, scheduler_id: str, now: datetime, workflow: Workflow,
                       events: list[Event]) -> list[Event]:
    step = _to_undo(new, workflow)
    for other in new.steps:
        if other is not step and other.status is StepStatus.COMPENSATING:
            # One undo in flight at a time. A record may hold an earlier step whose undo timed
            # out beside a later failed one (docs/upgrades.md, a refused step): the later goes
            # first, and the earlier waits its turn with its work still to undo.
            other.status = StepStatus.COMPLETED
            other.complete_by = None
    if step is not None and step.work_key is None:
        # Nothing can name the work to undo: an operator must, and the order says so.
        step.status = StepStatus.COMPENSATION_FAILED
        step.last_error = UNKNOWN_WORK_KEY
        return [*events, *give_up_compensation(new, step.name, UNKNOWN_WORK_KEY)]
    if step is None:
        new.compensation = CompensationState.DONE
        new.locked_by = None
        new.complete_by = None
        return [*events, Event("compensated", detail=", ".join(
            s.name for s in new.steps if s.status is StepStatus.COMPENSATED) or "nothing to undo")]
    # Undone by the result of its work: one never learned (in doubt, or done, or being undone,
    # by a release that kept none) is asked for again under its key first.
    step.status = (StepStatus.LEARNING if step.result is None else StepStatus.COMPENSATING)
    if step.status is StepStatus.COMPENSATING and step.undo_key is None and step.work_key:
        step.undo_key = undo_key(step.work_key)
    step.attempt += 1
    step.token = new_token()
    step.complete_by = now + workflow.step(step.name).budget
    new.compensation = CompensationState.RUNNING
    new.locked_by = scheduler_id
    new.complete_by = step.complete_by
    return events


def give_up_compensation(new: OrderState, step: str | None, why: str) -> list[Event]:
    new.compensation = CompensationState.FAILED
    new.locked_by = None
    new.complete_by = None
    new.last_error = f"compensation of {step} failed: {why}" if step else why
    return [Event("compensation_failed", step, why)]
