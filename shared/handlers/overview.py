"""The overview, what an operator looks at first: counts by state, what is in flight (the most
overdue first), what failed, what needs a hand, recent alerts and rejected intake, the pauses.
One read of up to OVERVIEW_SCAN state records (a page of 1000 per request) and of the week's
alerts; with more records, the counts are a lower bound and say so."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

from shared.adapters.alerts import AlertStore
from shared.adapters.state_store import OrderStore
from shared.domain.state import CompensationState, OrderState, ProcessState, due_at
from shared.handlers.operator_requests import MAX_PAGE
from shared.handlers.views import (
    AlertView,
    FailedView,
    InFlightView,
    Overview,
    PauseView,
    RejectionView,
)

# The overview's reach: a few requests per refresh, rows enough for a screen. Bulk actions
# read no more failed or running records than this either.
OVERVIEW_SCAN = 5000
OVERVIEW_ROWS = 50


def in_flight_view(s: OrderState, now: datetime, pending_grace: timedelta) -> InFlightView:
    due = due_at(s, pending_grace)
    overdue = (now - due).total_seconds()
    return InFlightView(
        OrderID=s.order_id, ProcessState=s.process_state, Compensation=s.compensation,
        CurrentStep=s.current_step.name if s.current_step else None, CompleteBy=due,
        OverdueSeconds=round(overdue, 1) if overdue > 0 else None,
        FailureCount=s.failure_count, UpdatedAt=s.updated_at, Held=s.held)


def failed_view(s: OrderState) -> FailedView:
    return FailedView(OrderID=s.order_id, Compensation=s.compensation, FailedStep=s.failed_step,
                      LastError=s.last_error, Resubmissions=s.generation, UpdatedAt=s.updated_at)


def overview(store: OrderStore, alerts: AlertStore, now: datetime, pending_grace: timedelta, *,
             paused: list[PauseView], rejected: Callable[[int], list[RejectionView]],
             rows: int = OVERVIEW_ROWS) -> Overview:
    """``rejected(n)``: the latest n rejected messages, without their bodies (up to 30,000
    units each, from anyone; GET /rejected and the message's own look-up give them)."""
    by_state: Counter[ProcessState] = Counter()
    by_comp: Counter[CompensationState] = Counter()
    in_flight: list[InFlightView] = []
    failed: list[FailedView] = []
    stuck: list[FailedView] = []
    parked: list[FailedView] = []
    counted, token = 0, None
    while True:
        states, token = store.list_states(None, MAX_PAGE, token)
        for s in states:
            by_state[s.process_state] += 1
            if s.compensation:
                by_comp[s.compensation] += 1
            if not s.is_settled:
                in_flight.append(in_flight_view(s, now, pending_grace))
            # A cancelled order whose undo failed needs a hand as a failed one's does.
            if s.compensation is CompensationState.FAILED:
                stuck.append(failed_view(s))
            elif s.process_state is ProcessState.PARKED:
                parked.append(failed_view(s))
            elif s.process_state is ProcessState.ERROR:
                failed.append(failed_view(s))
        counted += len(states)
        if not token or counted >= OVERVIEW_SCAN:
            break
    in_flight.sort(key=lambda v: (-(v.OverdueSeconds or 0), v.CompleteBy or now))
    open_alerts: list[AlertView] = []
    acknowledged: list[AlertView] = []
    scan = alerts.recent(now, 7)
    for a in scan:  # one pass for both lists
        kept = acknowledged if a.acknowledged_at is not None else open_alerts
        if len(kept) < rows:
            kept.append(AlertView.of(a))
        if len(open_alerts) >= rows and len(acknowledged) >= rows:
            break
    failed.sort(key=lambda v: v.UpdatedAt, reverse=True)
    stuck.sort(key=lambda v: v.UpdatedAt, reverse=True)
    return Overview(
        At=now, Counted=counted, Complete=not token,
        ByState={p: by_state[p] for p in ProcessState},
        ByCompensation={c: by_comp[c] for c in CompensationState},
        InFlight=in_flight[:rows], Failed=failed[:rows], CompensationFailed=stuck[:rows],
        Parked=sorted(parked, key=lambda v: v.UpdatedAt)[:rows],
        Alerts=open_alerts, Acknowledged=acknowledged, AlertsComplete=not scan.cut,
        Paused=paused, Rejected=rejected(rows))
