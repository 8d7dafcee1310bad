"""A re-drive: failed orders resubmitted in the background, paced, with progress, until every
order its selection picks has been through it.

An operator starts one with a selection (workflow, version, failed step, error text, when the
order failed) and a pace (orders a second: by default the slowest limit among the services of
the failed step's workflow, so the resubmitted orders do not wait out their steps' time at a
limit). A runner (handlers/redrive.py) takes it a page of failed orders at a time: it writes
the page's picks on the record (``batch``, each with the generation it had) before it
resubmits any, so a runner that dies mid-page leaves behind exactly what it may have done: the
next run counts the picks whose generation moved on as resubmitted and resubmits the others.
A resubmit is itself conditional on the order's record, so no order is resubmitted twice
whatever two runners do. An operator may pause, resume or cancel it; its record says where it
is (scanned, resubmitted, refused, the last refusals).

Pure: the record, and the transitions the operator's actions and the runner make on it.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from shared.domain import budget, text
from shared.domain.state import IllegalTransition, OrderState, ProcessState

SCHEMA_VERSION = 1
# Failed orders read a page; a page's picks are written on the record before any is resubmitted.
PAGE = 100
# Picks kept on the record at once: their ids fit a stored property (128 characters each).
MAX_BATCH = 100
# Refusals remembered (the newest), each an order id and why, for the operator to look at.
KEPT_REFUSALS = 5
# The pace when nothing sets one: no limit, no setting; and its bounds (slower than one order
# a hundred seconds is no pace an operator means).
DEFAULT_RATE = 10.0
MIN_RATE = 0.01
MAX_RATE = 1000.0
# Re-drives running or paused at once: each running one gets its turn in every run.
MAX_ACTIVE = 20
# What the record keeps of an operator's words: the batch's ids take half of its property.
KEPT_TEXT = 500
# A runner's claim on a re-drive holds this long past its run: one that dies frees it then.
LEASE_MARGIN = timedelta(seconds=5)


class RedriveState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    DONE = "done"


class NotApplicable(IllegalTransition):
    """The action does not apply to the re-drive as it is (paused already, ended): why."""


class Selection(BaseModel):
    """Which failed orders: every field given must match (error text: a part of the order's
    last error, in any case)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    workflow: str | None = None
    version: int | None = None
    failed_step: str | None = None
    error_text: str | None = None
    since: AwareDatetime | None = None
    until: AwareDatetime | None = None
    force: bool = False

    def picks(self, state: OrderState, default_workflow: str) -> bool:
        return (state.process_state is ProcessState.ERROR
                and (self.workflow is None
                     or (state.workflow or default_workflow) == self.workflow)
                and (self.version is None or state.workflow_version == self.version)
                and (self.failed_step is None or state.failed_step == self.failed_step)
                and (self.error_text is None
                     or self.error_text.casefold() in (state.last_error or "").casefold())
                and (self.since is None or state.updated_at >= self.since)
                and (self.until is None or state.updated_at < self.until))

    def describe(self) -> str:
        parts = [f"workflow {self.workflow}" if self.workflow else "",
                 f"version {self.version}" if self.version is not None else "",
                 f"failed at {self.failed_step}" if self.failed_step else "",
                 f"error containing {self.error_text!r}" if self.error_text else "",
                 f"failed since {self.since.isoformat()}" if self.since else "",
                 f"failed before {self.until.isoformat()}" if self.until else "",
                 "compensation failures too" if self.force else ""]
        return ", ".join(p for p in parts if p) or "every failed order"


class Pick(BaseModel):
    model_config = ConfigDict(frozen=True)
    order_id: str
    generation: int


class Refusal(BaseModel):
    model_config = ConfigDict(frozen=True)
    order_id: str
    why: str


class Redrive(BaseModel):
    """The record: what it picks, how fast, who started it and why, and where it is."""

    model_config = ConfigDict(frozen=True)
    id: str
    selection: Selection
    rate: float = Field(ge=MIN_RATE, le=MAX_RATE)
    reason: str
    by: str | None
    created: AwareDatetime
    state: RedriveState = RedriveState.RUNNING
    # Where the runner is in the listing of failed orders (None: at its start), and whether
    # the listing's last page has been read.
    cursor: str | None = None
    listed_all: bool = False
    batch: tuple[Pick, ...] = ()
    scanned: int = 0
    resubmitted: int = 0
    refused: int = 0
    refusals: tuple[Refusal, ...] = ()
    updated: AwareDatetime | None = None
    ended: AwareDatetime | None = None
    # The operator's last action on it (pause, resume, cancel): who, and why.
    changed_by: str | None = None
    change_reason: str | None = None
    # Why it waits now, when it does (a service of its workflow paused), for the operator.
    waiting: str | None = None
    runner: str | None = None
    lease_until: AwareDatetime | None = None
    schema_version: int = SCHEMA_VERSION

    @staticmethod
    def new_id(now: datetime) -> str:
        """Sorted newest first by its id (the table's order), unique by its random tail."""
        inverted = 10**13 - int(now.timestamp() * 1000)
        return f"rd-{inverted:013d}-{secrets.token_hex(4)}"

    @property
    def active(self) -> bool:
        return self.state in (RedriveState.RUNNING, RedriveState.PAUSED)

    @staticmethod
    def words(reason: str) -> str | None:
        """An operator's reason as the record keeps it: inert, within KEPT_TEXT."""
        return budget.clip(text.inert(reason), KEPT_TEXT) or None

    def pause(self, now: datetime, by: str | None, reason: str) -> Redrive:
        if self.state is not RedriveState.RUNNING:
            raise NotApplicable(f"re-drive {self.id} is {self.state.value}: only a running "
                                "one can be paused")
        return self.model_copy(update={"state": RedriveState.PAUSED, "updated": now,
                                       "changed_by": by, "change_reason": self.words(reason)})

    def resume(self, now: datetime, by: str | None, reason: str) -> Redrive:
        if self.state is not RedriveState.PAUSED:
            raise NotApplicable(f"re-drive {self.id} is {self.state.value}: only a paused one "
                                "can be resumed")
        return self.model_copy(update={"state": RedriveState.RUNNING, "updated": now,
                                       "changed_by": by, "change_reason": self.words(reason)})

    def cancel(self, now: datetime, by: str | None, reason: str) -> Redrive:
        """Ends it: the orders it resubmitted run on; the rest stay failed. A page its runner
        is in the middle of stops within about a second (at its pace, that many orders)."""
        if not self.active:
            raise NotApplicable(f"re-drive {self.id} is {self.state.value} already")
        return self.model_copy(update={"state": RedriveState.CANCELLED, "updated": now,
                                       "ended": now, "changed_by": by,
                                       "change_reason": reason or None})

    def claim(self, runner: str, now: datetime, until: datetime) -> Redrive:
        """The runner's claim until ``until``; refused while another's holds."""
        if self.state is not RedriveState.RUNNING:
            raise NotApplicable(f"re-drive {self.id} is {self.state.value}")
        if (self.runner not in (None, runner) and self.lease_until is not None
                and self.lease_until > now):
            raise NotApplicable(f"re-drive {self.id} is being run by {self.runner}")
        return self.model_copy(update={"runner": runner, "lease_until": until})

    def picked(self, picks: list[Pick], cursor: str | None, scanned: int, now: datetime,
               after: str | None) -> Redrive:
        """A page read, from the listing's place ``after``: its picks on the record, and the
        place after it (None: that was its last page). Once only: a page already taken (its
        write answered late, and tried again) is refused."""
        if self.batch:
            raise NotApplicable(f"re-drive {self.id} has picks to finish first")
        if self.cursor != after:
            raise NotApplicable(f"re-drive {self.id} has read this page already")
        return self.model_copy(update={"batch": tuple(picks[:MAX_BATCH]), "cursor": cursor,
                                       "listed_all": cursor is None,
                                       "scanned": self.scanned + scanned, "updated": now,
                                       "waiting": None})

    def settled(self, done: set[str], refused: list[Refusal], now: datetime) -> Redrive:
        """Picks that were resubmitted (``done``) or refused leave the batch and are counted;
        once each: a pick no longer on the record was counted before."""
        on = {p.order_id for p in self.batch}
        done = done & on
        refused = [r for r in refused if r.order_id in on and r.order_id not in done]
        kept = (*self.refusals, *(Refusal(order_id=r.order_id, why=budget.clip(
            text.inert(r.why), KEPT_TEXT)) for r in refused))[-KEPT_REFUSALS:]
        gone = done | {r.order_id for r in refused}
        return self.model_copy(update={
            "batch": tuple(p for p in self.batch if p.order_id not in gone),
            "resubmitted": self.resubmitted + len(done), "refused": self.refused + len(refused),
            "refusals": kept, "updated": now})

    @property
    def to_finish(self) -> bool:
        """Read to the end, every pick settled: nothing left to do."""
        return self.listed_all and not self.batch

    def finished(self, now: datetime) -> Redrive:
        return self.model_copy(update={"state": RedriveState.DONE, "ended": now,
                                       "updated": now, "cursor": None, "runner": None,
                                       "lease_until": None})

    def waits(self, why: str, now: datetime) -> Redrive:
        return self.model_copy(update={"waiting": why, "updated": now})
