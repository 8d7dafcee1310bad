"""Pauses: an operator stops a service's calls, or a workflow's intake, until they resume it.

A paused service's requests wait: its Agent calls nothing, and the Supervisor holds its steps
(their time stops running, no failure is counted) and sends each again, under the same attempt
and key, once the service is resumed. A paused workflow's new orders are taken and wait,
Pending; once it is resumed they start, oldest first. Neither is the circuit breaker, which is
automatic, per instance and short (docs/operating.md, Pausing a service or a workflow).

Pure: the records here are what the pause store keeps; ``hold`` and ``release`` are the
Supervisor's decisions about one order, written conditionally as every other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from shared.domain import budget, text
from shared.domain.effects import Dispatch, SendCommand
from shared.domain.messages import CommandKind
from shared.domain.state import (
    Cause,
    IllegalTransition,
    OrderState,
    ProcessState,
    StepStatus,
)
from shared.domain.transitions import emit, record_note

# Recent pauses remembered per target: a step whose attempt met one is sent again without
# counting a failure, however short the pause was.
KEEP_ENDED = 20
# How late an instance may learn of a pause or a resume (each reads them at most this often:
# adapters/pauses.CachedPauses). An Agent may drop a request this long after a resume, so a
# pause counts as lasting this much longer (and MARGIN more, for clocks a little apart) for
# the attempts it met, and what it held is released only once every instance knows.
LAG = timedelta(seconds=5)
MARGIN = timedelta(seconds=2)


class PauseKind(StrEnum):
    SERVICE = "service"
    WORKFLOW = "workflow"


class NotPausable(IllegalTransition):
    """Paused already, or not paused: why, in a sentence an operator can act on."""


@dataclass(frozen=True, order=True)
class Target:
    kind: PauseKind
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value} {self.name}"

    @property
    def key(self) -> str:
        """How a held order's record names what holds it (``OrderState.held``)."""
        return f"{self.kind.value}:{self.name}"

    @classmethod
    def parse(cls, key: str) -> Target:
        kind, _, name = key.partition(":")
        return cls(PauseKind(kind), name)


@dataclass(frozen=True)
class Pause:
    """One target's record: paused since when, by whom and why (``since`` None: running),
    and its recent pauses."""

    target: Target
    since: datetime | None = None
    by: str | None = None
    reason: str = ""
    ended: tuple[tuple[datetime, datetime], ...] = ()

    @property
    def paused(self) -> bool:
        return self.since is not None

    def pause(self, now: datetime, by: str | None, reason: str) -> Pause:
        if self.since is not None:
            raise NotPausable(f"{self.target} is paused already, by {self.by or 'an operator'} "
                              f"since {self.since:%Y-%m-%d %H:%M:%S}Z")
        return replace(self, since=now, by=budget.clip(by or "", 200) or None,
                       reason=budget.clip(reason, budget.REASON_TEXT))

    def resume(self, now: datetime) -> Pause:
        if self.since is None:
            raise NotPausable(f"{self.target} is not paused")
        ended = (*self.ended, (self.since, max(now, self.since)))[-KEEP_ENDED:]
        return replace(self, since=None, by=None, reason="", ended=ended)

    def met(self, start: datetime, end: datetime) -> bool:
        """Whether work running from ``start`` to ``end`` met this pause, now or a recent one,
        as an instance that learned of its end up to LAG late saw it."""
        if self.since is not None and self.since < end:
            return True
        return any(a < end and start < b + LAG + MARGIN for a, b in self.ended)

    def running_everywhere(self, now: datetime) -> bool:
        """Not paused, and every instance knows it by ``now``."""
        return self.since is None and (not self.ended or self.ended[-1][1] + LAG <= now)

    def describe(self) -> str:
        """For a note on an order and a log line: the operator's words made inert."""
        why = f": {text.inert(self.reason)}" if self.reason else ""
        since = f"{self.since:%Y-%m-%d %H:%M:%S}Z" if self.since else "?"
        return f"{self.target} paused by {text.inert(self.by or 'an operator')} since {since}{why}"

    def ended_to_json(self) -> str:
        return json.dumps([[a.isoformat(), b.isoformat()] for a, b in self.ended])

    @staticmethod
    def ended_from_json(text: str | None) -> tuple[tuple[datetime, datetime], ...]:
        return tuple((datetime.fromisoformat(a), datetime.fromisoformat(b))
                     for a, b in json.loads(text or "[]"))


@dataclass(frozen=True)
class Pauses:
    """Every target's record the store holds; a target it does not hold is running."""

    records: Mapping[Target, Pause] = field(default_factory=dict)

    def of(self, target: Target) -> Pause:
        return self.records.get(target) or Pause(target)

    def service(self, name: str) -> Pause:
        return self.of(Target(PauseKind.SERVICE, name))

    def workflow(self, name: str) -> Pause:
        return self.of(Target(PauseKind.WORKFLOW, name))

    @property
    def current(self) -> list[Pause]:
        return sorted((p for p in self.records.values() if p.paused), key=lambda p: p.target)

    def ended_since(self, at: datetime) -> list[Target]:
        """What runs again after a pause that ended after ``at``: the orders it held wait to
        be found."""
        return sorted(p.target for p in self.records.values()
                      if not p.paused and p.ended and p.ended[-1][1] > at)


NONE = Pauses()


def begun(state: OrderState) -> bool:
    """Whether any of the order's work has begun: a paused workflow holds only orders that have
    not (its intake), never one part done."""
    return state.process_state is not ProcessState.PENDING or any(
        s.status is not StepStatus.NOT_STARTED or s.in_doubt for s in state.steps)


class WaitsForResume(IllegalTransition):
    """A start the Scheduler does not take: the order's workflow is paused."""


def check_start(state: OrderState, pauses: Pauses, workflow: str) -> None:
    """Raise WaitsForResume when the order is one its paused workflow holds."""
    pause = pauses.workflow(workflow)
    if pause.paused and not begun(state):
        raise WaitsForResume(f"order {state.order_id} waits: {pause.describe()}")


def target_of(state: OrderState, workflow_name: str,
              service_of: Mapping[str, str]) -> Target | None:
    """What a pause would hold this order for now: its workflow, while it has not begun; the
    service of the step in flight (a do, an undo, or a do asked again before its undo)."""
    if not begun(state):
        return Target(PauseKind.WORKFLOW, workflow_name)
    step = state.current_step
    if step is not None and step.complete_by is not None:
        return Target(PauseKind.SERVICE, service_of[step.name])
    return None


def hold(state: OrderState, now: datetime, until: datetime, target: Target,
         why: str) -> OrderState:
    """The order waits for ``target`` to run (again): its time is moved to ``until`` (when the
    Supervisor looks again, unless the pause's end comes first), no failure is counted and
    nothing is sent: not a request still to send (the Agent would call nothing), nor a start
    (its release sends one). Said on the timeline once, when it begins to wait."""
    new = state._copy(now)
    if new.held != target.key:
        record_note(new, Cause.SUPERVISOR, now, f"waiting: {why}")
    new.held = target.key
    step = new.current_step
    if step is not None and step.complete_by is not None:
        step.complete_by = until
    new.complete_by = until
    new.outbox = [e for e in new.outbox if not isinstance(e, Dispatch | SendCommand)]
    new.forget_tokens()
    return new


def release(state: OrderState, now: datetime, target: Target, budget_of_step: timedelta,
            pending_grace: timedelta) -> OrderState:
    """``target`` is running again: a held order starts (its workflow's), or its step's
    attempt is sent again under the same key (its service's), with its whole budget and no
    failure counted."""
    new = state._copy(now)
    step = new.current_step
    if target.kind is PauseKind.WORKFLOW or step is None:
        new.complete_by = now + pending_grace
        why = f"{target} resumed: the order starts"
        emit(new, Cause.SUPERVISOR, now, [], SendCommand(command=CommandKind.START, reason=why),
             note=why)
        return new
    step.complete_by = now + budget_of_step
    new.complete_by = step.complete_by
    emit(new, Cause.SUPERVISOR, now, [], note=(
        f"{target} resumed: {step.name} attempt {step.attempt} sent again, not counted as a "
        "failure"))
    return new
