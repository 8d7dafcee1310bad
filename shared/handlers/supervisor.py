"""The Supervisor: each tick finds the overdue work in the due-time index and has it recovered.

It knows nothing of the business: what an overdue order needs is shared/domain/supervision.py's
decision. The index: docs/architecture.md, The due-time index; why a step due in an outage is
sent again without counting a failure: the same page, A storage outage.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from opentelemetry.trace import SpanKind

from shared import tracing
from shared.adapters.alerts import AlertSink
from shared.adapters.pauses import PauseStore
from shared.adapters.state_entity import CorruptRecord, NewerRecord
from shared.adapters.state_store import ConcurrencyConflict, InFlightEntry, OrderStore
from shared.adapters.tick_log import TickLogStore
from shared.clock import Clock
from shared.domain.alerts import AlertKind, OperatorAlert
from shared.domain.due_index import IndexKey
from shared.domain.effects import Forget
from shared.domain.outages import Gap, TickLog
from shared.domain.pauses import NONE, Pauses
from shared.domain.state import OrderState, RetryPolicy, due_at
from shared.domain.supervision import DecisionKind, SupervisorDecision, supervise
from shared.domain.workflow import Registry, UnknownWorkflow
from shared.handlers.failures import describe, without_python
from shared.handlers.relay import EffectRelay

log = logging.getLogger(__name__)

# Ticks in a row an order may fail before an operator is told: one bad tick is a blip (storage
# busy), several are a problem with that order. Counted per Supervisor process: the timer runs as
# a singleton, and a restart only delays the alert.
FAILING_TICKS_BEFORE_ALERT = 3
# Writes of the tick log a tick tries against other Supervisors' writes before it leaves it.
RECORD_TRIES = 5


@dataclass
class _Tick:
    """What one tick knows of outages: the record, and when storage last answered it."""

    log: TickLog
    last_answer: datetime
    pauses: Pauses = NONE

    def storage_answered(self, at: datetime, gap: timedelta) -> None:
        # A tick that itself hung on storage spans an outage: work due meanwhile is excused too.
        if at - self.last_answer > gap:
            self.log = self.log.with_gap(Gap(self.last_answer, at))
        self.last_answer = at


@dataclass
class TickReport:
    entities_read: int = 0
    due: int = 0  # index entries whose time had come
    moved: int = 0  # entries moved to their order's later due time
    dropped: int = 0  # entries no record names any more
    retried: int = 0
    failed: int = 0
    rescued: int = 0
    redispatched: int = 0
    forgotten: int = 0
    lost_races: int = 0
    excused: int = 0  # steps sent again because their time fell in an outage
    held: int = 0  # orders that began to wait for a paused service or workflow
    held_again: int = 0  # orders waiting still, looked at again (outside the budget)
    released: int = 0  # orders a pause held, started or sent again once it ended
    deferred: int = 0  # in-flight entries left to the next tick (recoveries per tick reached)
    unreadable: int = 0  # records reported to an operator this tick
    skipped: int = 0  # unreadable records reported before and unchanged since
    errors: int = 0  # orders a fault stopped this tick; the next tick tries them again


class Supervisor:
    """Every change it makes is a conditional write, so two Supervisors ticking at once recover
    each overdue step once: the second one's write loses, and it moves on. Each order is handled
    on its own: a record it cannot read is reported once and filed aside, and a fault on one
    order is counted and leaves the rest of the tick to run. A tick carries out at most
    ``max_recoveries_per_tick`` recoveries and leaves the rest to the next, so the burst of
    overdue work after an outage is spread over ticks."""

    def __init__(self, *, store: OrderStore, ticks: TickLogStore, relay: EffectRelay,
                 alerts: AlertSink, policy: RetryPolicy, workflows: Registry,
                 clock: Clock, pauses: PauseStore | None = None) -> None:
        self._store = store
        self._pauses = pauses
        self._ticks = ticks
        self._relay = relay
        self._alerts = alerts
        self._policy = policy
        self._workflows = workflows
        self._clock = clock
        self._failing: dict[str, int] = {}  # order id -> ticks in a row it could not be handled

    def tick(self) -> TickReport:
        with tracing.span("supervisor tick", parent=None, kind=SpanKind.INTERNAL):
            report = self._tick()
            tracing.annotate(**{f"supervisor.{k}": v for k, v in vars(report).items()
                                if isinstance(v, int)})
            return report

    def _tick(self) -> TickReport:
        report = TickReport()
        # Read first: with storage down the tick fails here, and the gap shows at the next one.
        # The tick starts when storage answers: a read that hung through an outage shows it.
        log_read, version = self._ticks.read()
        now = self._clock()
        report.entities_read += 1
        tick = _Tick(log_read.after_tick(now, self._policy.outage_gap), now)
        if self._pauses is not None:
            # One query a tick, of a partition holding only what was ever paused.
            tick.pauses = self._pauses.read_all()
            report.entities_read += len(tick.pauses.records)
        # Oldest due first, across the partitions: in the partitions' fixed order, one whose
        # entries keep coming due (records a tick steps aside from every pending grace, a newer
        # release's) would take every tick's budget from the orders in the partitions after it.
        entries = sorted(self._store.due(now, self._policy.max_recoveries_per_tick),
                         key=_due_of) + self._released(tick.pauses, now, report)
        tick.storage_answered(self._clock(), self._policy.outage_gap)
        for entry in entries:
            report.entities_read += 1
            report.due += 1
            if self._recoveries(report) >= self._policy.max_recoveries_per_tick:
                report.deferred += 1
                continue
            try:
                self._supervise(entry, report, tick)
                self._failing.pop(entry.order_id, None)
            except NewerRecord as e:
                # Not broken, a newer release's (a rolling deployment): its Supervisor has it.
                log.info("supervisor: order %s left to a newer release (%s)", entry.order_id, e)
                self._step_aside(entry, e.version, report)
            except CorruptRecord as e:
                self._unreadable(entry, e, report)
            except Exception as e:
                report.errors += 1
                log.exception("supervisor: order %s not handled this tick", entry.order_id)
                self._failed_again(entry, e)
        self._record(tick.log, version)
        log.info("supervisor tick at %s: %s", now.isoformat(), report)
        return report

    def _released(self, pauses: Pauses, now: datetime, report: TickReport) -> list[InFlightEntry]:
        """The orders held by a pause that ended within a recheck: filed for later (a hold's
        time is long, so that waiting costs a write a recheck), they are found now, the longest
        held first, a tick's budget at a time (one query per index partition for each). A
        failed look costs only itself: they are found at the next tick, or at their time."""
        found: list[InFlightEntry] = []
        for target in pauses.ended_since(now - self._policy.pause_recheck):
            if not pauses.of(target).running_everywhere(now):
                continue  # an instance may not know yet: it would drop what is sent
            try:
                found += self._store.held(target.key, now,
                                          self._policy.max_recoveries_per_tick)
            except Exception:
                report.errors += 1
                log.exception("supervisor: could not look for the orders %s held", target)
        return sorted(found, key=_due_of)

    @staticmethod
    def _recoveries(r: TickReport) -> int:
        # Unreadable records count: however many there are, a tick's writes stay bounded.
        return (r.retried + r.failed + r.rescued + r.redispatched + r.excused + r.unreadable
                + r.skipped + r.held + r.released)

    def _record(self, ticks: TickLog, version: str | None) -> None:
        for _ in range(RECORD_TRIES):
            try:
                self._ticks.write(ticks, version)
                return
            except ConcurrencyConflict:
                # Another Supervisor completed a tick meanwhile: keep what both saw.
                theirs, version = self._ticks.read()
                ticks = theirs.merge(ticks)
        # Others keep writing: they record the ticks, and this one's work is done.
        log.warning("supervisor: tick log busy, this tick not recorded")

    def _supervise(self, entry: InFlightEntry, report: TickReport, tick: _Tick) -> None:
        grace = self._policy.pending_grace
        if not entry.order_id:  # names no order: nothing any release wrote, nothing to follow
            log.warning("supervisor: index entry %s names no order; dropped", entry.key)
            self._store.drop(entry.key)
            report.dropped += 1
            return
        report.entities_read += 1
        state = self._store.get_state(entry.order_id)
        now = self._clock()  # when the record was read: decisions are about this moment
        tick.storage_answered(now, self._policy.outage_gap)
        if state is None or entry.generation not in (None, state.generation):
            # Written before an order (or a resubmission) that never followed, or left by a
            # generation that has settled: drop it once nothing can still be on its way.
            older = (state is not None and entry.generation is not None
                     and entry.generation < state.generation)
            if older or entry.since + grace < now:
                self._store.drop(entry.key)
                report.forgotten += 1
            return
        # An entry filed before the due-time index (its record predates it), or one this
        # Supervisor filed aside for a record it could not read: the record may name no entry,
        # or one that is gone, so this one stands for it until the order is filed anew.
        adopted = entry.base is None or entry.unreadable is not None
        if entry.key != state.index_key and not adopted:
            # Superseded, or put in by a write that failed. Dropped, unless a write against the
            # version still stored may yet land and name it.
            if entry.base != state.version or entry.since + grace < now:
                self._store.drop(entry.key)
                report.dropped += 1
            return
        try:
            workflow = self._workflows.of_record(state)
        except UnknownWorkflow as e:
            if not e.newer:  # removed from the app while orders still follow it: an operator's
                raise CorruptRecord(entry.order_id, state.version or "", str(e)) from e
            # A newer release's order, met while both run in a rolling deployment: its own
            # Supervisor follows it; this one leaves the record as it is.
            log.info("supervisor: order %s left to a newer release (%s)", entry.order_id, e)
            self._step_aside(entry, state.version or "", report)
            return
        decision = supervise(state, now, self._policy, workflow, tick.log, tick.pauses)
        if decision is None:
            if state.is_settled or due_at(state, grace) <= now:
                return  # settled: its writer is finishing it (if not, FORGET after the grace)
            try:  # its time moved later: file it there
                self._store.save(state, move=True)
                report.moved += 1
            except ConcurrencyConflict:
                report.lost_races += 1  # it moved meanwhile, and its writer filed it
        else:
            # The recovery belongs to the order's trace (as a child of its recorded context),
            # and is linked to the tick that found it.
            # A recovery is trouble: the order's trace is kept from here on (OrderSampler).
            with tracing.span(f"supervisor {decision.kind.value}", parent=state.trace,
                              kind=SpanKind.INTERNAL, links=[tracing.current_traceparent()],
                              # A pause's wait is an operator's choice, not trouble.
                              trouble=decision.kind not in _PAUSED,
                              attributes=tracing.order_attributes(
                                  state.order_id,
                                  state.current_step.name if state.current_step else None,
                                  state.current_step.attempt if state.current_step else None,
                                  state.generation, **{"order.reason": decision.reason})):
                self._act(decision, state, report)
        if adopted and entry.key != state.index_key:
            # The order is filed by its due time now (by this tick or its last writer).
            self._store.drop(entry.key)

    def _act(self, decision: SupervisorDecision, state: OrderState, report: TickReport) -> None:
        if decision.kind is DecisionKind.FORGET:
            # Settled, but whoever settled it did not finish: finish its effects, then drop it.
            self._relay.carry_out(state)
            if not any(isinstance(e, Forget) for e in state.outbox) and state.index_key:
                self._store.drop(state.index_key)  # what the Forget effect would have done
            report.forgotten += 1
            return
        try:
            # Filed anew at the order's next due time: this entry's time has passed.
            saved = self._store.save(decision.state, move=True)
        except ConcurrencyConflict:
            report.lost_races += 1  # someone moved it first: their move stands
            return
        carried = self._relay.carry_out(saved).state
        if decision.kind is DecisionKind.HOLD and carried.outbox:
            # What the outbox said is said (a status, an alert): a hold looked at again finds
            # nothing left to carry out, and says nothing twice.
            with contextlib.suppress(ConcurrencyConflict):
                self._store.confirm_outbox(carried)
        if decision.kind is DecisionKind.FAIL:
            report.failed += 1
        elif decision.kind is DecisionKind.RESCUE:
            report.rescued += 1
        elif decision.kind is DecisionKind.REDISPATCH:
            report.redispatched += 1
        elif decision.kind is DecisionKind.OUTAGE:
            report.excused += 1
        elif decision.kind is DecisionKind.HOLD:
            # Looked at again while it waits: spread over time as it began to wait, and never
            # more than once a recheck each, so not held against the tick's budget.
            if state.held == saved.held:
                report.held_again += 1
            else:
                report.held += 1
            return  # waiting is not trouble: not logged per order, every tick
        elif decision.kind is DecisionKind.RELEASE:
            report.released += 1
        else:
            report.retried += 1
        log.warning("supervisor: order %s %s (%s)", saved.order_id, decision.kind.value,
                    decision.reason)

    def _failed_again(self, entry: InFlightEntry, e: Exception) -> None:
        ticks = self._failing[entry.order_id] = self._failing.get(entry.order_id, 0) + 1
        if ticks != FAILING_TICKS_BEFORE_ALERT:
            return
        try:
            self._alerts.raise_alert(OperatorAlert(
                AlertKind.SUPERVISION_FAILING, entry.order_id,
                # In words: an operator reads it (the log has the exception's class and stack).
                f"the Supervisor could not handle this order {ticks} ticks in a row: "
                f"{_in_words(e)}"[:1000], self._clock(),
                key=f"{entry.order_id}.failing.{type(e).__name__}.{self._clock():%Y%m%d}"))
        except Exception:
            log.exception("supervisor: could not report order %s", entry.order_id)

    def _step_aside(self, entry: InFlightEntry, version: str, report: TickReport) -> None:
        """A newer release's order: its entry is filed a pending grace later, not left at the
        front of its partition, where (its release rolled back, say) it would take this
        Supervisor's reads every tick and keep the orders behind it from being recovered. The
        newer release's Supervisor, meeting it there, follows the order as before."""
        report.skipped += 1
        try:
            self._store.quarantine(entry, version, self._clock() + self._policy.pending_grace)
        except Exception:
            report.errors += 1
            log.exception("supervisor: could not file order %s aside", entry.order_id)

    def _unreadable(self, entry: InFlightEntry, e: CorruptRecord, report: TickReport) -> None:
        # Filed aside, to be read again later: never at the front of its partition, where it
        # would keep the orders behind it from being read at all.
        until = self._clock() + self._policy.unreadable_recheck
        try:
            if entry.unreadable == e.version:  # reported already, and unchanged since
                self._store.quarantine(entry, e.version, until)
                report.skipped += 1
                return
            self._alerts.raise_alert(OperatorAlert(
                AlertKind.RECORD_UNREADABLE, entry.order_id,
                f"the Supervisor cannot read this order's state record; it looks again every "
                f"{self._policy.unreadable_recheck} until the record is repaired: "
                f"{without_python(e.reason)}",
                self._clock(), key=f"{entry.order_id}.unreadable.{e.version}"))
            self._store.quarantine(entry, e.version, until)
            report.unreadable += 1
        except Exception:
            report.errors += 1
            log.exception("supervisor: could not report unreadable order %s", entry.order_id)


def _due_of(entry: InFlightEntry) -> datetime:
    """When an index entry came due: an entry from before the index first (it is overdue)."""
    try:
        return IndexKey.parse(entry.key).due or _BEFORE_THE_INDEX
    except ValueError:  # a key of no shape this code knows: handled (dropped) early
        return _BEFORE_THE_INDEX


_BEFORE_THE_INDEX = datetime(2000, 1, 1, tzinfo=UTC)
_PAUSED = (DecisionKind.HOLD, DecisionKind.RELEASE)


def _in_words(e: Exception) -> str:
    """An exception for an operator: a storage call's failure as failures.describe says it,
    anything else by its message with the Python taken out."""
    from azure.core.exceptions import AzureError

    if isinstance(e, AzureError):
        return f"storage {describe(e)}"
    return without_python(str(e)) or "an error (the app's log has the details)"
