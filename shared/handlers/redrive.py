"""The re-drive runner (shared/domain/redrive.py): a timer's invocation takes each running
re-drive in turn, for a few seconds, and resubmits its failed orders at its pace.

What it writes, in order, so that an instance dying anywhere loses and repeats nothing:
1. its claim on the re-drive (a lease, so that two instances never run one at once);
2. a page's picks, with the listing's place after it, before it resubmits any of them;
3. each resubmit (the single resubmit an operator makes, conditional on the order's record);
4. the picks done or refused, counted and taken off the record (every page, and when its time
   is up: what is left of the page is the next run's to finish first).
A run that finds picks on the record it did not settle counts those whose generation moved on
as resubmitted and resubmits the others.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial

from shared.adapters.pauses import PauseReader
from shared.adapters.redrives import RedriveStore
from shared.adapters.state_entity import CorruptRecord
from shared.adapters.state_store import ConcurrencyConflict, OrderStore
from shared.clock import Clock
from shared.domain.pauses import PauseKind, Target
from shared.domain.redrive import (
    LEASE_MARGIN,
    MAX_ACTIVE,
    PAGE,
    NotApplicable,
    Pick,
    Redrive,
    RedriveState,
    Refusal,
)
from shared.domain.state import CompensationState, IllegalTransition, OrderState, ProcessState
from shared.domain.workflow import Registry, UnknownWorkflow
from shared.handlers.operator_requests import OrderNotFound, ResubmitRefused

log = logging.getLogger(__name__)

# The runner's timer, and how long each of its runs may resubmit: less than the time between
# two, so that runs never overlap on one instance and a claim ends before the next run.
SCHEDULE = "*/10 * * * * *"
RUN_SECONDS = 9.0
# How often a running page looks at its record again: a pause or a cancel stops it this soon.
LOOK_EVERY = 1.0
# Conditional writes tried when the record moved on under the runner (an operator's action).
WRITES = 5

# (order id, reason, force, by, the generation picked): Operator.resubmit.
Resubmit = Callable[[str, str, bool, str | None, int], object]


class Stopped(Exception):
    """The re-drive is no longer the runner's to run: paused, cancelled, or claimed."""


@dataclass
class _Held:
    """The runner's re-drive, at the version it last wrote or read."""
    redrive: Redrive
    version: str


@dataclass
class RedriveRunner:
    store: RedriveStore
    orders: OrderStore
    resubmit: Resubmit
    workflows: Registry
    clock: Clock
    pauses: PauseReader | None = None
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    instance: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    # Resubmits at once (1: one after the other, in the caller's thread).
    workers: int = 8
    # When each re-drive's next resubmit may be made (monotonic), by its id: its pace holds
    # across pages and runs, and is its own (a slow one holds no other back).
    _next_at: dict[str, float] = field(default_factory=dict, init=False)

    def run(self, seconds: float) -> None:
        """Each running re-drive, oldest first, until ``seconds`` are spent."""
        deadline = self.monotonic() + seconds
        running = [(r, v) for r, v in self.store.listed(MAX_ACTIVE, active_only=True)
                   if r.state is RedriveState.RUNNING]
        for redrive, version in reversed(running):  # listed newest first
            if self.monotonic() >= deadline:
                return
            try:
                self._run(_Held(redrive, version), deadline)
            except Stopped as e:
                log.info("re-drive %s: %s", redrive.id, e)
            except Exception:  # one re-drive's trouble holds no other back; its next run retries
                log.exception("re-drive %s: its run failed", redrive.id)

    def _run(self, held: _Held, deadline: float) -> None:
        until = self.clock() + timedelta(seconds=max(0.0, deadline - self.monotonic()))
        self._write(held, lambda r: r.claim(self.instance, self.clock(), until + LEASE_MARGIN))
        while self.monotonic() < deadline:
            if held.redrive.batch:
                self._resubmit_batch(held, deadline)
                if held.redrive.batch:
                    return  # its time is up: the next run finishes the page first
                continue
            if held.redrive.to_finish:
                self._write(held, lambda r: r.finished(self.clock()))
                return
            waiting = self._waiting_for(held.redrive)
            if waiting is not None:
                if held.redrive.waiting != waiting:
                    self._write(held, partial(Redrive.waits, why=waiting, now=self.clock()))
                return
            states, token = self.orders.list_states(ProcessState.ERROR.value, PAGE,
                                                    held.redrive.cursor)
            default = self.workflows.default
            # An order still being undone is not picked (a resubmit would refuse it).
            picks = [Pick(order_id=s.order_id, generation=s.generation) for s in states
                     if held.redrive.selection.picks(s, default) and s.is_settled
                     and (held.redrive.selection.force
                          or s.compensation is not CompensationState.FAILED)]
            self._write(held, partial(Redrive.picked, picks=picks, cursor=token,
                                      scanned=len(states), now=self.clock(),
                                      after=held.redrive.cursor))

    def _resubmit_batch(self, held: _Held, deadline: float) -> None:
        """The record's picks, at its pace, until they are done or the time is up; then what
        was done is counted on the record. Up to ``workers`` resubmits run at once (each is a
        few storage requests: one at a time would hold the pace under ten a second)."""
        done: set[str] = set()
        refused: list[Refusal] = []
        failed: list[BaseException] = []
        lock = threading.Lock()
        slots = threading.BoundedSemaphore(self.workers)

        def one(pick: Pick) -> None:
            try:
                why = self._resubmit(held.redrive, pick)
            except BaseException as e:  # said once every resubmit begun has ended
                with lock:
                    failed.append(e)
                return
            finally:
                slots.release()
            with lock:
                if why is None:
                    done.add(pick.order_id)
                else:
                    refused.append(Refusal(order_id=pick.order_id, why=why))

        spacing = 1.0 / held.redrive.rate
        rid = held.redrive.id
        looked = self.monotonic()
        pool = ThreadPoolExecutor(self.workers, "redrive") if self.workers > 1 else None
        try:
            for pick in held.redrive.batch:
                now = self.monotonic()
                next_at = self._next_at.get(rid, 0.0)
                if max(now, next_at) >= deadline or failed:
                    break
                self.sleep(max(0.0, next_at - now))
                self._next_at[rid] = max(now, next_at) + spacing
                if self.monotonic() - looked >= LOOK_EVERY:
                    # After the wait: a pause or a cancel meanwhile stops it before this one.
                    looked = self.monotonic()
                    self._look(held)
                slots.acquire()
                if pool is None:
                    one(pick)
                else:
                    pool.submit(one, pick)
        finally:
            if pool is not None:
                pool.shutdown(wait=True)  # every resubmit begun has ended before counting
            if done or refused:
                self._write(held, lambda r: r.settled(done, refused, self.clock()),
                            running=False)
        if failed:
            raise failed[0]
        if held.redrive.state is not RedriveState.RUNNING:
            raise Stopped(f"{held.redrive.state.value} by {held.redrive.changed_by}")

    def _resubmit(self, redrive: Redrive, pick: Pick) -> str | None:
        """None once the order is resubmitted (now, or before: its generation moved on), or why
        it was refused."""
        try:
            state = self.orders.get_state(pick.order_id)
        except CorruptRecord as e:
            return e.reason
        if state is None:
            return f"order {pick.order_id} is gone"
        reason = f"re-drive {redrive.id}: {redrive.reason}"
        if state.generation != pick.generation:
            return self._moved_on(redrive, state)
        try:
            # At the generation picked, in the resubmit's own conditional write: one resubmitted
            # and failed again since this look is not resubmitted a second time.
            self.resubmit(pick.order_id, reason, redrive.selection.force, redrive.by,
                          pick.generation)
        except (ResubmitRefused, IllegalTransition, ValueError) as e:
            # Refused as resubmitted since this look: by whom decides whose it is to count.
            with contextlib.suppress(CorruptRecord):
                now = self.orders.get_state(pick.order_id)
                if now is not None and now.generation != pick.generation:
                    return self._moved_on(redrive, now)
            return str(e)
        except OrderNotFound:
            return f"order {pick.order_id} is gone"
        return None

    @staticmethod
    def _moved_on(redrive: Redrive, state: OrderState) -> str | None:
        """An order resubmitted since it was picked: by this re-drive (a runner of it that died,
        or whose claim ran out; the order's history names it), counted as resubmitted; or by
        someone else, which is not this re-drive's to count."""
        if any(str(h.get("reason", "")).startswith(f"re-drive {redrive.id}:")
               for h in state.history):
            return None
        return f"order {state.order_id} was resubmitted meanwhile, not by this re-drive"

    def _waiting_for(self, redrive: Redrive) -> str | None:
        """Why its orders would only wait now: a service they fail at, or their workflow, is
        paused (they are resubmitted once it is resumed)."""
        if self.pauses is None:
            return None
        pauses = self.pauses.current()
        name = redrive.selection.workflow or self.workflows.default
        if pauses.of(Target(PauseKind.WORKFLOW, name)).paused:
            return f"workflow {name} is paused"
        step = redrive.selection.failed_step
        if step is None:
            return None
        try:
            service = self.workflows.get(name).step(step).service
        except (UnknownWorkflow, KeyError, ValueError):
            return None
        if pauses.of(Target(PauseKind.SERVICE, service)).paused:
            return f"service {service} is paused"
        return None

    def _look(self, held: _Held) -> None:
        redrive, version = self.store.read(held.redrive.id)
        if redrive is None or version is None:
            raise Stopped("its record is gone or unreadable")
        if version != held.version:
            # An operator's action, kept; the picks are this runner's still.
            held.redrive, held.version = redrive, version
        if redrive.state is not RedriveState.RUNNING:
            raise Stopped(f"{redrive.state.value} by {redrive.changed_by}")
        if redrive.runner != self.instance:
            raise Stopped(f"claimed by {redrive.runner} (this runner's claim ran out)")

    def _write(self, held: _Held, change: Callable[[Redrive], Redrive], *,
               running: bool = True) -> None:
        """``change`` written at the version held; on a lost race, applied again to the record
        as it is now (what the runner did is never lost), unless ``running`` is asked for and
        it is no longer running."""
        for _ in range(WRITES):
            try:
                new = change(held.redrive)
            except NotApplicable as e:
                raise Stopped(str(e)) from None
            try:
                held.version = self.store.write(new, held.version)
                held.redrive = new
                return
            except ConcurrencyConflict:
                redrive, version = self.store.read(held.redrive.id)
                if redrive is None or version is None:
                    raise Stopped("its record is gone or unreadable") from None
                held.redrive, held.version = redrive, version
                if running and redrive.state is not RedriveState.RUNNING:
                    raise Stopped(f"{redrive.state.value} by {redrive.changed_by}") from None
        raise Stopped(f"its record kept changing ({WRITES} writes lost)")
