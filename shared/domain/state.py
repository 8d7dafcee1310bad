"""The state record of an order: its fields, states and schema. Field names follow the design
brief's contract; the transitions the record may make are in ``transitions``."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, TypedDict

from shared.domain.effects import (
    Dispatch,
    Effect,
    has_dispatch,
)
from shared.domain.messages import (
    AgentReply,
    StatusEvent,
    new_token,
    token_digest,
)

# The digests of an attempt's tokens kept (StepState.token): enough for the copies that can
# still be answered, each 71 characters.
KEPT_DIGESTS = 4


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
    # Stopped by an operator: nothing more is sent for it, and its work is undone, as a failed
    # order's is; not a failure (no alert, no resubmit).
    CANCELLED = "Cancelled"
    # A step needs a person (StepRetry.park, NeedsPerson): nothing runs until an operator
    # resumes it (that step asked again under its key) or cancels it.
    PARKED = "Parked"


# The states whose completed work is undone (the compensation runs for them alone).
UNDONE = frozenset({ProcessState.ERROR, ProcessState.CANCELLED})


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
    # This attempt's token (messages.new_token), sent in its request; a reply must echo it.
    # Kept only while the request may still have to be sent (the outbox holds its dispatch):
    # after that, only its digest, which nobody can echo. An attempt sent again once its
    # token was forgotten (the Supervisor, after an outage) is sent with a new one, and a
    # copy or reply of either is the attempt's own: the last few digests are kept. None of
    # either on a step last sent by a release before them: its reply is taken as before.
    token: str | None = None
    token_digests: tuple[str, ...] = ()
    # What its service answered when the work was done (a charge's id, say): handed to the
    # later steps and to its own undo. None: not done, or done by a release that kept none.
    result: dict[str, Any] | None = None
    # The key its undo is done under, chosen once when the undo is first sent.
    undo_key: str | None = None
    # Its undo was given up unanswered (timed out): the work may or may not have been undone.
    undo_in_doubt: bool = False
    # Times it timed out in this run of the order (what its own StepRetry.attempts counts).
    timeouts: int = 0

    def issue_token(self, *, again: bool = False) -> None:
        """A token for the attempt: a new attempt's, or (``again``) one more for this attempt,
        sent again once its token was forgotten."""
        self.token = new_token()
        kept = self.token_digests[-(KEPT_DIGESTS - 1):] if again else ()
        self.token_digests = (*kept, token_digest(self.token))

    @property
    def token_forgotten(self) -> bool:
        return self.token is None and bool(self.token_digests)

    def holds(self, token: str | None) -> bool:
        """Whether ``token`` is this attempt's (any is, on a step sent before tokens)."""
        if self.token_digests:
            return token is not None and token_digest(token) in self.token_digests
        return self.token is None or token == self.token

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
            **({"token_digests": list(self.token_digests)} if self.token_digests else {}),
            **({"result": self.result} if self.result is not None else {}),
            **({"undo_key": self.undo_key} if self.undo_key is not None else {}),
            **({"undo_in_doubt": True} if self.undo_in_doubt else {}),
            **({"timeouts": self.timeouts} if self.timeouts else {}),
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
            token_digests=tuple(str(t) for t in d.get("token_digests") or ()),
            result=d["result"] if isinstance(d.get("result"), dict) else None,
            undo_key=d.get("undo_key"),
            undo_in_doubt=bool(d.get("undo_in_doubt", False)),
            timeouts=int(d.get("timeouts", 0)),
        )


@dataclass(frozen=True)
class Event:
    """Something a submitter or an operator should hear about."""

    kind: StatusEvent
    step: str | None = None
    detail: str | None = None


class TimelineEvent(TypedDict, total=False):
    """One line of an order's story as its record keeps it (``Timeline``): when, what caused
    it, what happened, and, where they say something, the step, the attempt, a detail and who
    (an operator)."""
    at: str
    cause: str
    event: str
    step: str
    attempt: int
    detail: str
    by: str


# The shapes of the record this release writes (shared/domain/legacy.py reads the older ones).
# 2: steps record their work key (and, read by this release, their result and undo key); the
# record names its schema version. 3: a step may be learning (StepStatus.LEARNING), which a
# release of shape 2 cannot read: it leaves such a record to this one. 4: Cancelled. 5: an order
# held by a pause (``OrderState.held``), whose time a release before pauses would run out.
SCHEMA_VERSION = 5


def schema_of(state: OrderState) -> int:
    """The shape ``state`` is written in: the oldest that holds it, so that the release before
    this one, running beside it, still reads every record it can run."""
    if state.held is not None or state.process_state is ProcessState.PARKED:
        return 5  # held or parked: states the releases before them do not know
    if state.process_state is ProcessState.CANCELLED:
        return 4  # a state the releases before it do not know: they leave the record alone
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
    # The order message the order was taken from (its Service Bus message id): every status
    # update names it, so a receiver can check it answers a message it sent.
    message_id: str | None = None
    last_error: str | None = None
    # The step whose failure put the order in Error.
    failed_step: str | None = None
    # How often an operator resubmitted the order, and what happened before each time.
    generation: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    # What happened to the order, oldest first, held to budget.TIMELINE (newest kept): each
    # transition's cause, events, dispatch and the reason the Supervisor or an operator gave.
    timeline: list[TimelineEvent] = field(default_factory=list)
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
    # The pause the order waits for (pauses.Target.key): its time is the Supervisor's next look,
    # and no failure is counted. None: not held. Every transition but a hold clears it.
    held: str | None = None
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

    def forget_tokens(self) -> None:
        """Keep a step's token only while the outbox may still send its request: then only
        its digest (StepState.token)."""
        pending = {e.step for e in self.outbox if isinstance(e, Dispatch)}
        for step in self.steps:
            if step.token_digests and step.name not in pending:
                step.token = None

    def confirmed(self) -> OrderState:
        """This record once its outbox is known carried out: no outbox, and no token left that
        a reader of the record could echo."""
        new = copy.deepcopy(self)
        new.outbox = []
        new.forget_tokens()
        return new

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
    if process_state in (ProcessState.PROCESSED, ProcessState.PARKED):
        return True  # parked: nothing happens to it but by an operator's hand
    return process_state in UNDONE and compensation in (
        CompensationState.DONE, CompensationState.FAILED)


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
    # How long an order a pause holds waits before the Supervisor looks at it again (one write
    # each time): a safety net, since the pause's end is what releases it, found at the next
    # tick (Supervisor._released, OrderStore.held).
    pause_recheck: timedelta = timedelta(hours=1)


def doubled(first: timedelta, longest: timedelta, failures: int) -> timedelta:
    """``first``, doubled for each failure after the first, never above ``longest`` (nor
    past what a timedelta holds, however many failures)."""
    try:
        grown: timedelta = first * (2 ** max(0, failures - 1))
    except OverflowError:
        return longest
    return min(longest, grown)


def exponential_backoff(base: timedelta, cap: timedelta) -> Callable[[int], timedelta]:
    """Delay before retry number ``failures``: base, 2 x base, 4 x base, ... never above cap."""

    def delay(failures: int) -> timedelta:
        return doubled(base, cap, failures)

    return delay


def due_at(state: OrderState, pending_grace: timedelta) -> datetime:
    """When the Supervisor steps in, unless the order moves first (a new order has no
    complete-by time yet: it is due a grace period after it arrived)."""
    return state.complete_by or state.created_at + pending_grace


