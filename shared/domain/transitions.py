"""Every transition an order's state record may make.

Transitions are pure: each takes a state and returns a new one, or raises IllegalTransition. The
new state carries its outbox: the effects the transition causes (alerts, status, commands, the
dispatch of a step, leaving the due-time index), written in the same conditional write, so
nothing that follows a committed transition can be lost (see ``effects``). The Scheduler and the
Supervisor decide *when* to call them; the state store decides *whether* the write wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

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
)
from shared.domain.messages import (
    Action,
    AgentReply,
    CommandKind,
    ReplyOutcome,
    new_work_key,
    undo_key,
)
from shared.domain.state import (
    UNDONE,
    Cause,
    CompensationState,
    Event,
    ForgedReply,
    IllegalTransition,
    OrderState,
    ProcessState,
    StepState,
    StepStatus,
    TimelineEvent,
    reply_cause,
)
from shared.domain.workflow import Workflow

# What a submitter's status update says of a failure: its category, never a remote service's
# error text (which may carry another party's data, or the service's internals). The record,
# its timeline and the operator's alert keep the whole text.
_FOR_SUBMITTER: dict[str, str] = {
    "failed": "the step could not be done; what was done before it is being undone",
    "compensation_failed": "the step could not be undone; an operator has been alerted",
    "cancelled": "cancelled by an operator; what was done is being undone",
    # "parked": the step's declared words (Event.detail), never a service's own text.
}

_ALERTS: dict[str, AlertKind] = {
    "failed": AlertKind.ORDER_FAILED,
    "compensation_failed": AlertKind.COMPENSATION_FAILED,
    "parked": AlertKind.ORDER_PARKED,
}


def receive(order_id: str, workflow: Workflow, now: datetime,
            reply_to: str | None = None, message_id: str | None = None) -> OrderState:
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
        message_id=message_id,
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
          delivery: Delivery = UNPROVEN) -> OrderState:
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
    return new


def _check_token(state: OrderState, step: StepState, reply: AgentReply) -> None:
    if not step.holds(reply.token):
        raise ForgedReply(
            f"a {reply.action.value} reply for {state.order_id}/{step.name} attempt "
            f"{reply.attempt} without the token of the request the app sent: refused, the "
            "step waits for its own reply", step.name, step.complete_by)


def apply_reply(
    state: OrderState, reply: AgentReply, scheduler_id: str, now: datetime, workflow: Workflow
) -> OrderState:
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
        return new
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
        return new
    if (state.process_state not in UNDONE
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
    return new


def _replied(reply: AgentReply) -> Delivery:
    # Held to its attempt's token before any transition (_check_token): its word is taken.
    return Delivery(reply.outbox_seq, vouched=True)


def begin_compensation(state: OrderState, scheduler_id: str, now: datetime, workflow: Workflow,
                       delivery: Delivery = UNPROVEN) -> OrderState:
    """A Scheduler takes a requested compensation and undoes the latest step still to undo;
    ``delivery``: how its command came."""
    if (state.process_state not in UNDONE
            or state.compensation is not CompensationState.PENDING):
        raise IllegalTransition(
            f"order {state.order_id} is {state.process_state}, compensation {state.compensation}"
        )
    new = state._copy(now)
    new.rescues = 0
    emit(new, Cause.COMPENSATE, now, _next_compensation(new, scheduler_id, now, workflow, []),
         delivery=delivery)
    return new


def _run(state: OrderState, step: StepState, now: datetime, workflow: Workflow) -> None:
    step.status = StepStatus.RUNNING
    step.attempt += 1
    step.issue_token()
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


def record_note(new: OrderState, cause: str, now: datetime, note: str,
                by: str | None = None) -> None:
    """Add a note to the order's timeline, for a change that sends nothing (a hold)."""
    _record(new, cause, now, [], note, by)


def _record(new: OrderState, cause: str, now: datetime, events: list[Event],
            note: str | None, by: str | None) -> None:
    """Add the transition to the order's timeline."""
    at = now.isoformat()
    entries: list[dict[str, Any]] = []  # a TimelineEvent each, once its empty fields go
    if note is not None:
        entries.append({"at": at, "cause": cause, "event": "note",
                        "detail": budget.clip(note, budget.ERROR_TEXT), "by": by})
    entries += [{"at": at, "cause": cause, "event": e.kind, "step": e.step,
                 "detail": e.detail} for e in events]
    entries += [{"at": at, "cause": cause, "event": f"{d.action.value} sent", "step": d.step,
                 "attempt": d.attempt} for d in new.outbox if isinstance(d, Dispatch)]
    if not entries:  # a claim with nothing else to say, say
        entries.append({"at": at, "cause": cause, "event": new.process_state.value})
    compact = [cast(TimelineEvent, {k: v for k, v in e.items() if v is not None})
               for e in entries]
    new.timeline = budget.newest_within([*new.timeline, *compact], budget.TIMELINE)


def _finish(new: OrderState, cause: str, effects: list[Effect]) -> None:
    step = new.current_step
    if step is not None and step.complete_by is not None:
        action = Action.UNDO if step.status is StepStatus.COMPENSATING else Action.DO
        effects.append(Dispatch(step=step.name, action=action, attempt=step.attempt))
        if step.token_forgotten:  # its request is sent again: with a token that can be
            step.issue_token(again=True)
    if new.is_settled:
        effects.append(Forget(generation=new.generation))
    new.outbox = effects
    new.outbox_cause = cause
    new.held = None  # whatever moved the order, it no longer waits for a pause
    new.forget_tokens()


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
    if reply.needs is not None and unkept is None:
        return _park(new, step, reply.needs, budget.clip_error(reply.error))
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


def _park(new: OrderState, step: StepState, needs: str, error: str | None) -> list[Event]:
    """A person must act before the step can be done: the order waits, parked, for an
    operator, who resumes it (the step asked again under its key) or cancels it (its work
    undone, this step's learned first). Its done work stands meanwhile."""
    step.status = StepStatus.NOT_STARTED
    # Its service said it did nothing, but a copy of the request answered otherwise, or the
    # person's act itself, may have done the work: a cancel asks again under its key first.
    step.in_doubt = True
    step.last_error = error
    new.process_state = ProcessState.PARKED
    new.failed_step = step.name
    new.last_error = f"{step.name} needs a person: {needs}"
    new.locked_by = None
    new.complete_by = None
    return [Event("parked", step.name, needs)]


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
    step.issue_token()
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
