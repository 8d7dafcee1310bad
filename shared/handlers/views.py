"""What the operator API answers, as models: each response is built from one of them, and the
OpenAPI document (shared/contracts) takes its schemas from the same models, so the two cannot
drift apart."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared import tracing
from shared.adapters.alerts import StoredAlert
from shared.adapters.rejections import RejectionKind, StoredRejection

# Modules, not names: the fields are named like the types (ProcessState: ProcessState).
from shared.domain import state as domain
from shared.domain.pauses import Pause
from shared.domain.redrive import Redrive


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StepView(_View):
    name: str
    status: domain.StepStatus
    attempt: int
    complete_by: datetime | None
    last_error: str | None
    in_doubt: bool
    work_key: str | None = Field(description="The key the step's work was done under; its "
                                             "undo names it.")
    result: dict[str, Any] | None = Field(None, description=(
        "What the step's service answered when its work was done: handed to the later steps "
        "and to its own undo."))
    undo_key: str | None = Field(None, description="The key its undo is done under, once sent.")
    undo_in_doubt: bool = Field(False, description="Its undo was given up unanswered: the work "
                                                   "may or may not have been undone.")
    timeouts: int = Field(0, description="Times it timed out in this run of the order (what "
                                         "its own declared attempts count).")


class TimelineEntry(_View):
    at: datetime
    event: str = Field(description="received, a status event (step_completed, failed, ...), "
                                   "'do sent' / 'undo sent' (an attempt dispatched), a "
                                   "process state (a claim), or 'note' (a reason given)")
    cause: str | None = Field(None, description="What made the transition: intake, start, "
                                                "compensate, supervisor, operator, or "
                                                "reply:<step>:<do|undo>:<attempt>")
    step: str | None = None
    attempt: int | None = None
    detail: str | None = None
    by: str | None = Field(None, description="Who, for an operator's action")


class OrderView(_View):
    OrderID: str
    Workflow: str | None = Field(None, description="The workflow the order follows, and its "
                                                   "version (null: the app's default, as "
                                                   "records before workflows had a name).")
    WorkflowVersion: int | None = None
    ProcessState: domain.ProcessState
    LockedBy: str | None
    CompleteBy: datetime | None
    FailureCount: int
    Compensation: domain.CompensationState | None
    CurrentStep: str | None
    LastError: str | None
    FailedStep: str | None
    Resubmissions: int
    CreatedAt: datetime
    UpdatedAt: datetime
    Rescues: int
    Held: str | None = Field(None, description="The paused service or workflow the order waits "
                                               "for (service:<name>): its time stands still, "
                                               "no failure counted; null when not held.")
    Steps: list[StepView]
    History: list[dict[str, Any]] = Field(description="What happened before each resubmission.")
    Outbox: list[dict[str, Any]] = Field(
        description="What the last transition still has to carry out (empty once known done).")
    Timeline: list[TimelineEntry] | None = Field(
        None, description="What happened to the order, oldest first, the oldest entries "
                          "dropped past a size budget (GET of one order).")
    TraceId: str | None = Field(None, description="The order's trace: look it up in "
                                                  "Application Insights or any OpenTelemetry "
                                                  "backend (README, Tracing).")
    Order: dict[str, Any] | None = Field(
        None, description="The order as submitted, as its workflow's message model took it "
                          "(for the default workflow, schemas/order.schema.json) (GET of one "
                          "order).")


def state_view(s: domain.OrderState, order: dict[str, Any] | None = None) -> OrderView:
    return OrderView(
        OrderID=s.order_id, Workflow=s.workflow, WorkflowVersion=s.workflow_version,
        ProcessState=s.process_state, LockedBy=s.locked_by,
        CompleteBy=s.complete_by, FailureCount=s.failure_count, Compensation=s.compensation,
        CurrentStep=s.current_step.name if s.current_step else None, LastError=s.last_error,
        FailedStep=s.failed_step, Resubmissions=s.generation, CreatedAt=s.created_at,
        UpdatedAt=s.updated_at, Rescues=s.rescues, Held=s.held,
        # Not the attempt's token: only the request and its reply may carry it (a reader of the
        # API could otherwise answer for the Agent).
        Steps=[StepView.model_validate({k: v for k, v in st.to_dict().items()
                                            if k not in ("token", "token_digests")})
               for st in s.steps],
        History=s.history, Outbox=[e.model_dump(mode="json") for e in s.outbox],
        TraceId=tracing.trace_id(s.trace),
        Timeline=([TimelineEntry.model_validate(e) for e in s.timeline]
                  if order is not None else None),
        Order=order,
    )


class OrderPage(_View):
    orders: list[OrderView]
    continuation: str | None = Field(description="Pass back as ?continuation= for the next page.")
    truncated: bool = Field(False, description=(
        "A search by customer found more orders than it shows, or stopped scanning the table "
        "before its end: more of the customer's orders may exist (one page, no continuation)."))


class AlertView(_View):
    AlertId: str = Field(description="Names the alert for POST /alerts/{alert_id}/ack.")
    RaisedAt: datetime | None
    Kind: str
    OrderID: str | None
    Step: str | None
    Reason: str | None
    AcknowledgedBy: str | None = Field(None, description="Who acknowledged it, as signed in "
                                                         "(null: not acknowledged).")
    AcknowledgedAt: datetime | None = None
    AckNote: str | None = Field(None, description="What they said, if anything.")
    Source: str | None = Field(None, description=(
        "Of a rolled-up alert (RequestRefused, OrderConflict: raised by what anyone who may "
        "send can send), what raised them: one alert a day per kind and source."))
    Count: int | None = Field(None, description=(
        "How many that day (null: a single alert); OrderID, Step and Reason are the latest's, "
        "RaisedAt the first's."))
    LastRaisedAt: datetime | None = Field(None, description="When the latest came.")

    @classmethod
    def of(cls, a: StoredAlert) -> AlertView:
        return cls(AlertId=a.alert_id, RaisedAt=a.raised_at, Kind=a.kind, OrderID=a.order_id,
                   Step=a.step, Reason=a.reason, AcknowledgedBy=a.acknowledged_by,
                   AcknowledgedAt=a.acknowledged_at, AckNote=a.ack_note, Source=a.source,
                   Count=a.count, LastRaisedAt=a.last_raised_at)


class AlertPage(_View):
    alerts: list[AlertView] = Field(description="Newest first, of the last 7 days.")
    truncated: bool = Field(False, description=(
        "The listing read as many alert rows as it may (2,000) without finding as many as "
        "asked for: older alerts of those days are not shown."))


class RejectionView(_View):
    RejectedAt: datetime | None
    Kind: RejectionKind
    MessageId: str | None
    Reason: str | None
    DeliveryCount: int | None = None
    Body: str | None = Field(None, description="The message body as received (its first 30,000 "
                                               "UTF-16 units when longer).")
    BodyBytes: int | None = Field(None, description="The whole body's size in bytes (rows "
                                                    "before this field have none).")
    BodySha256: str | None = Field(None, description="The whole body's SHA-256, hex.")

    @classmethod
    def of(cls, r: StoredRejection) -> RejectionView:
        return cls(RejectedAt=r.rejected_at, Kind=r.kind, MessageId=r.message_id,
                   Reason=r.reason, DeliveryCount=r.delivery_count, Body=r.body,
                   BodyBytes=r.body_bytes, BodySha256=r.body_sha256)


class PauseView(_View):
    Kind: str = Field(description='"service" or "workflow".')
    Name: str
    Paused: bool
    Since: datetime | None = Field(None, description="When it was paused; null: running.")
    By: str | None = Field(None, description="Who paused it, as signed in.")
    Reason: str | None = None
    LastPaused: list[list[datetime]] = Field(
        default_factory=list, description="Its recent pauses, [from, to], oldest first: a "
        "step whose attempt met one is sent again without counting a failure.")

    @classmethod
    def of(cls, p: Pause) -> PauseView:
        return cls(Kind=p.target.kind.value, Name=p.target.name, Paused=p.paused,
                   Since=p.since, By=p.by, Reason=p.reason or None,
                   LastPaused=[[a, b] for a, b in p.ended])


class PauseList(_View):
    Pauses: list[PauseView] = Field(description="Every service and workflow of the app, the "
                                                "paused first.")


class RefusalView(_View):
    OrderID: str
    Why: str


class RedriveView(_View):
    Id: str
    State: str = Field(description='"running", "paused", "cancelled" or "done".')
    Picks: str = Field(description="Which failed orders it resubmits, in words.")
    Selection: dict[str, Any] = Field(description="The same, as asked for.")
    Rate: float = Field(description="Orders resubmitted a second.")
    Reason: str
    By: str | None
    Created: datetime
    Updated: datetime | None
    Ended: datetime | None
    Scanned: int = Field(description="Failed orders' records read so far.")
    Resubmitted: int
    Refused: int
    InHand: int = Field(description="Orders picked and being resubmitted now.")
    Refusals: list[RefusalView] = Field(description="The latest refusals, with why.")
    Waiting: str | None = Field(None, description="Why it waits now (a paused service).")
    ChangedBy: str | None = Field(None, description="Who paused, resumed or cancelled it "
                                                    "last.")
    ChangeReason: str | None = None

    @classmethod
    def of(cls, r: Redrive) -> RedriveView:
        return cls(Id=r.id, State=r.state.value, Picks=r.selection.describe(),
                   Selection=r.selection.model_dump(mode="json", exclude_none=True),
                   Rate=r.rate, Reason=r.reason, By=r.by, Created=r.created, Updated=r.updated,
                   Ended=r.ended, Scanned=r.scanned, Resubmitted=r.resubmitted,
                   Refused=r.refused, InHand=len(r.batch),
                   Refusals=[RefusalView(OrderID=x.order_id, Why=x.why) for x in r.refusals],
                   Waiting=r.waiting, ChangedBy=r.changed_by, ChangeReason=r.change_reason)


class RedriveList(_View):
    Redrives: list[RedriveView] = Field(description="The newest first.")


class RedrivePreview(_View):
    DryRun: bool = True
    Picks: str
    Matched: int = Field(description="Failed orders it would pick among those scanned.")
    Scanned: int
    More: bool = Field(description="More failed orders than one look reads: it may pick "
                                   "more than Matched.")
    Sample: list[str] = Field(description="The first few orders it would pick.")
    Rate: float


class InFlightView(_View):
    OrderID: str
    ProcessState: domain.ProcessState
    Compensation: domain.CompensationState | None
    CurrentStep: str | None
    CompleteBy: datetime = Field(description="When the Supervisor steps in unless the order "
                                             "moves first.")
    OverdueSeconds: float | None = Field(description="How long past its complete-by time; "
                                                     "null when not overdue.")
    FailureCount: int
    UpdatedAt: datetime
    Held: str | None = Field(None, description="The paused service or workflow it waits for "
                                               "(service:<name>); null when not held.")


class FailedView(_View):
    OrderID: str
    Compensation: domain.CompensationState | None
    FailedStep: str | None
    LastError: str | None
    Resubmissions: int
    UpdatedAt: datetime


class Overview(_View):
    At: datetime
    Counted: int = Field(description="State records read for the counts.")
    Complete: bool = Field(description="False when the store holds more records than one "
                                       "overview reads: the counts are then a lower bound.")
    ByState: dict[domain.ProcessState, int]
    ByCompensation: dict[domain.CompensationState, int]
    InFlight: list[InFlightView] = Field(description="Not settled, the most overdue first.")
    Failed: list[FailedView] = Field(description="In Error, newest first (compensation done, "
                                                 "under way or none needed).")
    CompensationFailed: list[FailedView] = Field(description="An operator must finish these.")
    Parked: list[FailedView] = Field(default_factory=list, description=(
        "Waiting for a person (the step that needs one, and what: LastError), the longest "
        "waiting first: resume each once done (POST /orders/{id}/resume), or cancel it."))
    Alerts: list[AlertView] = Field(description="Recent alerts nobody has acknowledged yet.")
    Acknowledged: list[AlertView] = Field(description="Recent acknowledged alerts, with who "
                                                      "and when.")
    AlertsComplete: bool = Field(True, description=(
        "False when the overview read as many alert rows as it may (2,000) and stopped: "
        "older alerts of the last 7 days, open ones among them, are not in the lists."))
    Paused: list[PauseView] = Field(default_factory=list, description=(
        "The services and workflows an operator paused, with who and since when."))
    Rejected: list[RejectionView] = Field(description=(
        "Recent rejected intake, without the bodies (Body null): GET /rejected has them."))


class RejectedPage(_View):
    rejected: list[RejectionView]
    continuation: str | None


class BulkItem(_View):
    OrderID: str
    FailedStep: str | None
    LastError: str | None
    Compensation: domain.CompensationState | None
    UpdatedAt: datetime
    Outcome: str = Field(description='"would resubmit" (a dry run), "resubmitted" or '
                                     '"refused".')
    Why: str | None = Field(description="Why it was (or would be) refused.")


class BulkResult(_View):
    DryRun: bool
    Items: list[BulkItem] = Field(description="The orders picked, newest failure first, at "
                                              "most the request's limit.")
    Scanned: int = Field(description="Failed orders' records read to pick them.")
    More: bool = Field(description="More orders may match than this batch (or than one "
                                   "request reads): ask again, after acting on these.")
    Skipped: int = Field(0, description="Failed orders that match but that a resubmit would "
                                        "refuse (compensation not settled; compensation failed "
                                        "and no force; written by a newer release): not "
                                        "picked, so they never hold back the others.")


class HealthReport(_View):
    status: str = Field(description='"ok", or "unhealthy" with a 503.')
    checks: dict[str, str] = Field(description='Each check (the state table, each queue the '
                                               'app reads): "ok", "failed" or "no answer '
                                               'within 4 s".')


class SupervisorHealth(_View):
    last_tick: datetime | None = Field(description="When the last completed Supervisor tick "
                                                   "(of any instance) began.")
    seconds_since: float | None
    late: bool | None = Field(description="No tick for longer than the gap the Supervisor "
                                          "itself counts as an outage (OutageGapSeconds); "
                                          "null when the record could not be read.")
    problem: str | None = Field(description="What is wrong, in words; null when nothing is.")


class HealthDetails(_View):
    status: str = Field(description='"ok", or "unhealthy" with a 503 (storage, as the '
                                    'machine route decides it).')
    checks: dict[str, str] = Field(description='Each check: "ok" or what went wrong, in '
                                               'words.')
    breakers: dict[str, str] = Field(description="Each remote service's circuit breaker as "
                                                 "the instance that answered sees it: closed, "
                                                 "open or half-open (each instance keeps its "
                                                 "own).")
    backlog: dict[str, int | None] = Field(description="Each queue the app reads: its "
                                                       "approximate message count (null when "
                                                       "it could not be read). The orders "
                                                       "channel (Service Bus) is not here.")
    poison: dict[str, int | None] = Field(description="Each of those queues' poison queue: "
                                                      "messages the host gave up on (0 when "
                                                      "there is none).")
    supervisor: SupervisorHealth
    paused: list[PauseView] | None = Field(default_factory=list, description=(
        "The services and workflows an operator paused, with who and since when: their orders "
        "wait, by design (GET /pauses lists every one); null when they could not be read."))


class ErrorBody(_View):
    error: str = Field(description="What is wrong, in a sentence.")

