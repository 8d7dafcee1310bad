"""What an operator can do: look orders up, list them by state, resubmit a failed one, read
alerts and rejected intake, check health. Used by the HTTP API and the orders CLI alike."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from opentelemetry.trace import SpanKind

from shared import tracing
from shared.adapters.alerts import AckRefused, AlertStore
from shared.adapters.rejections import RejectionStore
from shared.adapters.state_entity import CorruptRecord
from shared.adapters.state_store import ConcurrencyConflict, OrderStore
from shared.clock import Clock
from shared.domain.alerts import AlertKind
from shared.domain.cancellation import cancel
from shared.domain.parking import resume_parked
from shared.domain.resubmission import resubmit
from shared.domain.state import (
    CompensationState,
    IllegalTransition,
    OrderState,
    ProcessState,
)
from shared.domain.workflow import Registry, UnknownWorkflow
from shared.handlers.audit import OperatorAction, audit
from shared.handlers.failures import without_python
from shared.handlers.health import HealthProbe
from shared.handlers.operator_requests import (
    ID_PREFIX,
    MAX_NOTE,
    MAX_PAGE,
    MAX_REASON,
    BulkCancelRequest,
    BulkResubmitRequest,
    CancelRefused,
    OrderNotFound,
    ResubmitRefused,
    ResumeRefused,
    check_alert_id,
    check_order_id,
    check_state,
)
from shared.handlers.overview import OVERVIEW_ROWS, OVERVIEW_SCAN, overview
from shared.handlers.pausing import PauseControl
from shared.handlers.relay import EffectRelay
from shared.handlers.views import (
    AlertPage,
    AlertView,
    BulkItem,
    BulkResult,
    HealthDetails,
    HealthReport,
    OrderPage,
    OrderView,
    Overview,
    PauseView,
    RejectedPage,
    RejectionView,
    state_view,
)

log = logging.getLogger(__name__)

# A search by customer reads each order it finds (one point read each): at most this many.
MAX_SEARCH = 50


def _resubmittable(state: OrderState, force: bool, workflows: Registry) -> bool:
    """What a resubmit takes (shared/domain/resubmission.resubmit, and Operator._resubmit)."""
    return (state.is_settled and not state.from_newer_release
            and (force or state.compensation is not CompensationState.FAILED)
            and _runnable(state, workflows) is None)


def _runnable(state: OrderState, workflows: Registry, verb: str = "resubmit") -> str | None:
    """Why this release could not run the order again, if it could not: a resubmit keeps the
    version the order started on, and one taken out of the registry would leave it Pending
    with nobody to take it."""
    try:
        workflows.of_record(state)
    except UnknownWorkflow as e:
        known = [w.version for w in workflows.workflows
                 if w.name == (state.workflow or workflows.default)]
        if e.newer or (known and state.workflow_version > max(known)):
            # Mid-rollout: the newer release's instances run it.
            return (f"order {state.order_id} is of a newer release of the app ({e}): {verb} "
                    "it once that release runs")
        return (f"order {state.order_id} started on workflow {state.workflow or 'the default'} "
                f"version {state.workflow_version}, which this app does not run ({e}): "
                f"{verb} it where that version runs, or put the version back in the registry")
    return None


def _each(picked: list[OrderState], verb: str, done: str, dry_run: bool,
          rehearse: Callable[[OrderState], object],
          act: Callable[[OrderState], object]) -> list[BulkItem]:
    """A bulk action's outcome for each order it picked: what it would come to (``rehearse``,
    the single action's own check, nothing written) or came to (``act``, the single action),
    or why it was refused; one refused does not stop the others."""
    items = []
    for s in picked:
        item: dict[str, Any] = {"OrderID": s.order_id, "FailedStep": s.failed_step,
                                "LastError": s.last_error, "Compensation": s.compensation,
                                "UpdatedAt": s.updated_at, "Outcome": "", "Why": None}
        try:
            (rehearse if dry_run else act)(s)
            item["Outcome"] = f"would {verb}" if dry_run else done
        except (IllegalTransition, ResubmitRefused, CancelRefused) as e:
            item["Outcome"], item["Why"] = "refused", str(e)
        except OrderNotFound:  # gone since it was listed
            item["Outcome"], item["Why"] = "refused", f"order {s.order_id} is gone"
        except CorruptRecord as e:  # changed since it was listed, to what this cannot read
            item["Outcome"], item["Why"] = "refused", without_python(e.reason)
        items.append(BulkItem.model_validate(item))
    return items


class Operator:
    def __init__(self, *, store: OrderStore, relay: EffectRelay, alerts: AlertStore,
                 rejections: RejectionStore, health: HealthProbe, pending_grace: timedelta,
                 clock: Clock, customer_columns: Sequence[str] = (),
                 pauses: PauseControl | None = None) -> None:
        """``customer_columns``: the stored order columns a search by customer reads (the
        workflows' message models name them: Registry.customer_columns)."""
        self._store = store
        self._customer_columns = tuple(customer_columns)
        self._relay = relay
        self._alerts = alerts
        self._rejections = rejections
        self._health = health
        self._pending_grace = pending_grace
        self._clock = clock
        self._pauses = pauses

    @property
    def pauses(self) -> PauseControl:
        """Pausing and resuming services and workflows (shared/handlers/pausing.py)."""
        if self._pauses is None:
            raise RuntimeError("this operator service was built without a pause store")
        return self._pauses

    def _paused(self) -> list[PauseView]:
        if self._pauses is None:
            return []
        return [p for p in self._pauses.list().Pauses if p.Paused]

    def get(self, order_id: str) -> OrderView:
        check_order_id(order_id)
        stored = self._store.load(order_id)
        if stored is None:
            raise OrderNotFound(order_id)
        return state_view(stored.state, stored.order)

    def orders(self, process_state: str | None, limit: int, continuation: str | None,
               prefix: str | None = None, customer: str | None = None) -> OrderPage:
        """A page of orders, optionally of one state, whose id starts with ``prefix``, of one
        customer (the stored order's customer column; one page only, no continuation)."""
        check_state(process_state)
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE}")
        if prefix is not None and not ID_PREFIX.fullmatch(prefix):
            raise ValueError(f"{prefix[:160]!r} is not the start of an order id (letters, "
                             "digits and ._:~- , up to 149 characters)")
        if customer is not None:
            if not customer or len(customer) > 128:
                raise ValueError("customer must be 1 to 128 characters")
            if continuation:
                raise ValueError("a search by customer has one page: no continuation")
            if not self._customer_columns:
                raise ValueError("no workflow of this app names a customer in its orders (its "
                                 "message model's customer_column): search by id or state")
            cap, found, every = min(limit, MAX_SEARCH), [], True
            for column in self._customer_columns:
                ids, complete = self._store.order_ids_where(column, customer, cap)
                found += ids
                every = every and complete
            ids = list(dict.fromkeys(found))
            states = [s for s in map(self._readable_state, ids[:cap]) if s is not None
                      and (process_state is None or s.process_state.value == process_state)
                      and (prefix is None or s.order_id.startswith(prefix))]
            return OrderPage(orders=[state_view(s) for s in states], continuation=None,
                             truncated=not every or len(ids) > cap)
        states, token = self._store.list_states(process_state, limit, continuation,
                                                prefix=prefix or None)
        return OrderPage(orders=[state_view(s) for s in states], continuation=token)

    def _readable_state(self, order_id: str) -> OrderState | None:
        """As a listing reads: an unreadable record is left out (the Supervisor reports it)."""
        try:
            return self._store.get_state(order_id)
        except CorruptRecord as e:
            log.warning("%s", e)
            return None

    def _asked(self, order_id: str, reason: str, what: str,
               required: bool = False) -> OrderState:
        """The order an action on one names, once its id and reason are found fit: a 400 for
        either, a 404 for an order there is not."""
        check_order_id(order_id)
        if len(reason) > MAX_REASON or (required and not reason.strip()):
            raise ValueError(f"{what} needs a reason of {int(required)} to {MAX_REASON} "
                             "characters")
        state = self._store.get_state(order_id)
        if state is None:
            raise OrderNotFound(order_id)
        return state

    def resubmit(self, order_id: str, reason: str = "", force: bool = False,
                 by: str | None = None, generation: int | None = None) -> OrderView:
        """``by``: who asks, as the platform authenticated them; kept in the order's history
        and timeline. ``generation``: only the order's run of that generation (as a re-drive
        picked it), refused if it was resubmitted since, by the same conditional write."""
        state = self._asked(order_id, reason, "a resubmit")
        # A resubmitted order was in trouble: its new run is traced whole (OrderSampler).
        with tracing.span("operator resubmit", parent=state.trace, kind=SpanKind.INTERNAL,
                          trouble=True,
                          attributes=tracing.order_attributes(
                              order_id, None, None, state.generation + 1,
                              **{"order.forced": force})):
            action = OperatorAction.RESUBMIT_WITH_FORCE if force else OperatorAction.RESUBMIT
            try:
                view = self._resubmit(state, reason, force, by, generation)
            except ResubmitRefused as e:
                audit(action, order_id, by, reason, f"refused: {e}", self._clock())
                raise
            audit(action, order_id, by, reason, "done", self._clock())
            return view

    def _resubmit(self, state: OrderState, reason: str, force: bool,
                  by: str | None, generation: int | None = None) -> OrderView:
        order_id = state.order_id
        if generation is not None and state.generation != generation:
            raise ResubmitRefused(f"order {order_id} was resubmitted meanwhile (it is at run "
                                  f"{state.generation + 1}, not {generation + 1})")
        if state.from_newer_release:
            # Rewritten by this release, it would lose what the newer one records: that
            # release's operator API resubmits it (the rollout is under way, or went back).
            raise ResubmitRefused(f"order {order_id} was written by a newer release of the app "
                                  f"(record schema {state.schema_version}); resubmit it once "
                                  "that release runs")
        why = _runnable(state, self._relay.workflows)
        if why is not None:
            raise ResubmitRefused(why)
        try:
            new = resubmit(state, self._clock(), self._pending_grace, reason, force, by)
        except IllegalTransition as e:
            raise ResubmitRefused(str(e)) from None
        try:
            # The new generation is indexed first: never lost to the Supervisor.
            saved = self._store.save(new)
        except ConcurrencyConflict:
            raise ResubmitRefused(f"order {order_id} changed meanwhile; look again") from None
        saved = self._relay.carry_out(saved).state
        return state_view(saved)

    def resubmit_many(self, ask: BulkResubmitRequest, by: str | None) -> BulkResult:
        """Resubmit the failed orders ``ask`` picks, newest first, at most ``ask.limit`` (or,
        with ``dry_run``, say what each would come to): each as a single resubmit is, its
        history naming ``by``. Reads at most OVERVIEW_SCAN failed records."""
        now = self._clock()
        picked: list[OrderState] = []
        scanned, skipped, token = 0, 0, None
        while len(picked) < ask.limit + 1:  # one more: is there more than this batch?
            states, token = self._store.list_states(ProcessState.ERROR.value, MAX_PAGE, token)
            scanned += len(states)
            matching = [s for s in states
                        if (ask.since is None or s.updated_at >= ask.since)
                        and (ask.until is None or s.updated_at < ask.until)
                        and (ask.failed_step is None or s.failed_step == ask.failed_step)]
            # Those a resubmit would refuse are not picked: a batch of them would come back
            # first on every call, and the others never be reached.
            takeable = [s for s in matching
                        if _resubmittable(s, ask.force, self._relay.workflows)]
            skipped += len(matching) - len(takeable)
            picked += takeable
            if not token or scanned >= OVERVIEW_SCAN:
                break
        picked.sort(key=lambda s: s.updated_at, reverse=True)
        items = _each(picked[:ask.limit], "resubmit", "resubmitted", ask.dry_run,
                      # the same check a resubmit makes, nothing written
                      lambda s: resubmit(s, now, self._pending_grace, ask.reason, ask.force, by),
                      lambda s: self.resubmit(s.order_id, ask.reason, ask.force, by))
        return BulkResult(DryRun=ask.dry_run, Items=items, Scanned=scanned,
                          More=len(picked) > ask.limit or bool(token), Skipped=skipped)

    def cancel(self, order_id: str, reason: str, by: str | None = None) -> OrderView:
        """Stop an order still running and have its work undone (domain/cancellation.py);
        refused, saying why, when it is past that."""
        state = self._asked(order_id, reason, "a cancel", required=True)
        with tracing.span("operator cancel", parent=state.trace, kind=SpanKind.INTERNAL,
                          trouble=True, attributes=tracing.order_attributes(order_id)):
            try:
                view = self._cancel(state, reason, by)
            except CancelRefused as e:
                audit(OperatorAction.CANCEL, order_id, by, reason, f"refused: {e}",
                      self._clock())
                raise
            audit(OperatorAction.CANCEL, order_id, by, reason, "done", self._clock())
            return view

    def resume(self, order_id: str, reason: str = "", by: str | None = None) -> OrderView:
        """Go on with a parked order from the step that needed a person, under its key
        (domain/parking.py), once the person has acted; refused, saying why, unless parked."""
        state = self._asked(order_id, reason, "a resume")
        with tracing.span("operator resume", parent=state.trace, kind=SpanKind.INTERNAL,
                          trouble=True, attributes=tracing.order_attributes(order_id)):
            try:
                why = (f"order {order_id} was written by a newer release of the app (record "
                       f"schema {state.schema_version}); resume it once that release runs"
                       if state.from_newer_release
                       else _runnable(state, self._relay.workflows, "resume"))
                if why is not None:
                    raise IllegalTransition(why)
                new = resume_parked(state, self._clock(), self._pending_grace, reason, by)
                saved = self._store.save(new)
            except (IllegalTransition, ConcurrencyConflict) as e:
                why = (str(e) if isinstance(e, IllegalTransition)
                       else f"order {order_id} changed meanwhile; look again")
                audit(OperatorAction.RESUME_ORDER, order_id, by, reason, f"refused: {why}",
                      self._clock())
                raise ResumeRefused(why) from None
            audit(OperatorAction.RESUME_ORDER, order_id, by, reason, "done", self._clock())
            return state_view(self._relay.carry_out(saved).state)

    def _cancel(self, state: OrderState, reason: str, by: str | None) -> OrderView:
        if state.from_newer_release:
            raise CancelRefused(f"order {state.order_id} was written by a newer release of the "
                                f"app (record schema {state.schema_version}); cancel it once "
                                "that release runs")
        try:
            new = cancel(state, self._clock(), self._pending_grace, reason, by)
        except IllegalTransition as e:
            raise CancelRefused(str(e)) from None
        try:
            saved = self._store.save(new)
        except ConcurrencyConflict:
            raise CancelRefused(f"order {state.order_id} changed meanwhile; look again") from None
        return state_view(self._relay.carry_out(saved).state)

    def cancel_many(self, ask: BulkCancelRequest, by: str | None) -> BulkResult:
        """Cancel the running orders ``ask`` picks, newest first, at most ``ask.limit`` (or,
        with ``dry_run``, say what each would come to), each as a single cancel is."""
        now = self._clock()
        picked: list[OrderState] = []
        scanned, token = 0, None
        states_asked = [ask.state] if ask.state else [ProcessState.PENDING.value,
                                                      ProcessState.PROCESSING.value]
        for asked in states_asked:
            token = None
            while len(picked) < ask.limit + 1 and scanned < OVERVIEW_SCAN:
                states, token = self._store.list_states(asked, MAX_PAGE, token, ask.prefix)
                scanned += len(states)
                picked += [s for s in states
                           if (ask.since is None or s.created_at >= ask.since)
                           and (ask.until is None or s.created_at < ask.until)]
                if not token:
                    break
        picked.sort(key=lambda s: s.created_at, reverse=True)
        items = _each(picked[:ask.limit], "cancel", "cancelled", ask.dry_run,
                      lambda s: cancel(s, now, self._pending_grace, ask.reason, by),
                      lambda s: self.cancel(s.order_id, ask.reason, by))
        return BulkResult(DryRun=ask.dry_run, Items=items, Scanned=scanned,
                          More=len(picked) > ask.limit or bool(token), Skipped=0)

    def alerts(self, limit: int = 50, days: int = 7, acknowledged: bool | None = None,
               kind: str | None = None) -> AlertPage:
        """The newest alerts first (one partition a day, newest row first within it);
        ``acknowledged``: only those (True) or only those not yet (False). ``truncated``:
        fewer than ``limit`` were found in the rows one scan reads, and rows were left."""
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE}")
        out: list[AlertView] = []
        if kind is not None and kind not in set(AlertKind):
            raise ValueError(f"kind must be one of {', '.join(AlertKind)}, not {kind[:40]!r}")
        scan = self._alerts.recent(self._clock(), days, kind)
        for a in scan:
            if acknowledged is None or (a.acknowledged_at is not None) == acknowledged:
                out.append(AlertView.of(a))
                if len(out) >= limit:
                    break
        return AlertPage(alerts=out, truncated=scan.cut)

    def acknowledge(self, alert_id: str, by: str, note: str = "") -> AlertView:
        """Mark the alert seen by ``by`` (as signed in) now; once: a second acknowledgement
        is refused, naming the first."""
        day, row = check_alert_id(alert_id)
        if len(note) > MAX_NOTE:
            raise ValueError(f"the note is {len(note)} characters; at most {MAX_NOTE}")
        try:
            acked = self._alerts.acknowledge(day, row, by, note or None, self._clock())
        except AckRefused as e:
            audit(OperatorAction.ACKNOWLEDGE, alert_id, by, note, f"refused: {e}", self._clock())
            raise
        audit(OperatorAction.ACKNOWLEDGE, alert_id, by, note, "done", self._clock())
        return AlertView.of(acked)

    def alerts_for(self, order_id: str, days: int = 7) -> list[AlertView]:
        """This order's alerts, oldest first."""
        check_order_id(order_id)
        return [AlertView.of(a) for a in self._alerts.of_order(order_id, self._clock(), days)]

    def rejection(self, message_id: str) -> RejectionView | None:
        """Why intake rejected the message with this id, if it did."""
        r = self._rejections.of_message(message_id)
        return None if r is None else RejectionView.of(r)

    def rejected(self, limit: int = 50, continuation: str | None = None,
                 bodies: bool = True) -> RejectedPage:
        """One page of rejected intake, newest sent first (``bodies``: with them)."""
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE}")
        rows, token = self._rejections.page(limit, continuation, bodies)
        return RejectedPage(rejected=[RejectionView.of(r) for r in rows], continuation=token)

    def overview(self, rows: int = OVERVIEW_ROWS) -> Overview:
        """What an operator looks at first (shared/handlers/overview.py)."""
        return overview(self._store, self._alerts, self._clock(), self._pending_grace,
                        paused=self._paused(),
                        rejected=lambda n: self.rejected(n, bodies=False).rejected, rows=rows)

    def health(self, detailed: bool = False) -> HealthReport | HealthDetails:
        """Whether storage answers; ``detailed`` (an operator's): why not, the breakers, the
        last Supervisor tick and the backlog per queue (shared/handlers/health.py)."""
        report = self._health.run(detailed)
        if not detailed:
            return HealthReport.model_validate(report)
        try:
            paused: list[PauseView] | None = self._paused()
        except Exception:  # health answers with storage down: that is what it reports
            log.warning("health: the pauses could not be read", exc_info=True)
            paused = None
        return HealthDetails.model_validate({**report, "paused": paused})
