"""Writes tests/upgrade/fixtures/*.json from the earlier releases themselves.

For each scenario below, the release's ``shared`` package is taken from git
(``git archive <commit> shared``) and run in a subprocess of its own (release_runner.py) against
Azurite: its intake, Scheduler, Agents, Supervisor and operator take an order part of the way,
then what they left in storage is read back (the state record, the order row, the index entry,
the messages still on the queues, the work the services hold). Nothing in a fixture is written
by hand or by this release's code; each names the commit whose code wrote it.

One scenario may give several fixtures, one per shape it is there to show (the rest of the
snapshot is the context that shape lives in). ``test_legacy_shapes.py`` loads each into a fresh
pipeline of this release and runs the order until it settles.

    .venv/bin/python -m tests.upgrade.make_fixtures            # all
    .venv/bin/python -m tests.upgrade.make_fixtures NAME ...   # only these scenarios
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUNNER = Path(__file__).resolve().parent / "release_runner.py"

ORDER = {"customer_id": "c-1", "items": [{"sku": "A", "quantity": 2, "unit_price": "9.99"}]}
PROCESSED = {"ProcessState": "Processed", "Compensation": None,
             "standing": {"reserve_inventory": 1, "charge_payment": 1, "arrange_shipping": 1}}
COMPENSATED = {"ProcessState": "Error", "Compensation": "Done", "standing": {}}
DIGITAL_PROCESSED = {"ProcessState": "Processed", "Compensation": None,
                     "standing": {"charge_payment": 1, "send_download_link": 1}}


@dataclass(frozen=True)
class Shape:
    """One fixture: which part of the snapshot is the shape under test."""

    file: str
    # state-record, index-entry, order-row, scheduler-command, agent-request or agent-reply
    kind: str
    shape: str  # what is old about it, in a line
    # ("table", role, RowKey or None for the order's index entry) or ("queue", role)
    where: tuple[str, ...]
    strip: tuple[str, ...] = ()  # properties taken off the entity (see the scenario's note)


@dataclass(frozen=True)
class Scenario:
    name: str
    commit: str
    description: str
    script: list[list[Any]]
    shapes: list[Shape]
    expect: dict[str, Any]
    after: dict[str, Any] = field(default_factory=dict)
    order: dict[str, Any] = field(default_factory=dict)
    settle_seconds: float = 0
    # Whether the order needs the Supervisor after the upgrade (its messages were lost). When
    # not, the messages alone must carry it to the end: the test holds the Supervisor to no
    # recovery, so a message this release failed to act on cannot pass unseen.
    supervised: bool = False


def _record(file: str, shape: str) -> Shape:
    return Shape(file, "state-record", shape, ("table", "OrderState", "state"))


def _entry(file: str, shape: str, strip: tuple[str, ...] = ()) -> Shape:
    return Shape(file, "index-entry", shape, ("table", "OrdersInFlight"), strip)


FAIL_SHIPPING_D227DDA = [
    ["intake"], ["command"], ["agent", "inventory"], ["reply"], ["agent", "payment"], ["reply"],
    ["drop", "shipping"], ["tick", 61], ["command"], ["drop", "shipping"], ["tick", 61]]

SCENARIOS = [
    # --- the first release: no work keys, no generations, no outbox, inflight/<id> ----------
    Scenario(
        "d227dda-charge-reply-lost", "d227dda",
        "Charging: the charge was made but its reply was lost; the request is gone from the "
        "queue, so only the Supervisor (through the index entry) can find the order.",
        [["intake"], ["command"], ["agent", "inventory"], ["reply"], ["agent", "payment"],
         ["drop", "responses"]],
        [_record("state-record_d227dda_processing-reply-lost",
                 "state record of the first release: steps without work_key; no Resubmissions, "
                 "History, FailedStep, Outbox, Rescues, TraceParent, IndexKey, SchemaVersion, "
                 "Timeline, Workflow; JSON ASCII-escaped")],
        {**PROCESSED, "FailureCount": 1}, supervised=True),
    Scenario(
        "d227dda-given-up", "d227dda",
        "Reserved and charged; both shipping attempts lost, so the Supervisor gave up: Error, "
        "compensation Pending, its compensate command on the Scheduler's queue. The completed "
        "steps must be undone under the keys their work was done under.",
        FAIL_SHIPPING_D227DDA,
        [Shape("scheduler-command_d227dda_compensate", "scheduler-command",
               "compensate command of the first release: no outbox_seq, no traceparent",
               ("queue", "scheduler"))],
        COMPENSATED),
    Scenario(
        "d227dda-given-up-command-lost", "d227dda",
        "As d227dda-given-up, but the compensate command was lost too: the Supervisor must "
        "hand the compensation on, and the undo of each completed step must name the key "
        "its work was done under (never recorded by this release: worked out on reading).",
        [*FAIL_SHIPPING_D227DDA, ["drop", "scheduler"]],
        [_record("state-record_d227dda_error-compensation-pending",
                 "state record of the first release, failed by its Supervisor: completed steps "
                 "without work_key, the timed-out step failed and in doubt")],
        COMPENSATED, supervised=True),
    Scenario(
        "d227dda-start-lost", "d227dda",
        "Accepted, but the start command was lost: only the index entry names the order.",
        [["intake"], ["drop", "scheduler"]],
        [_entry("index-entry_d227dda_inflight-order-id",
                "in-flight entry of the first releases: inflight/<OrderID>, Since only "
                "(no generation, no OrderID property)")],
        PROCESSED, supervised=True),
    Scenario(
        "d227dda-start-queued", "d227dda",
        "Accepted; the start command waits on the Scheduler's queue.",
        [["intake"]],
        [Shape("scheduler-command_d227dda_start", "scheduler-command",
               "start command of the first release: kind, order_id, reason, schema_version",
               ("queue", "scheduler"))],
        PROCESSED),
    Scenario(
        "d227dda-request-queued", "d227dda",
        "Claimed; the reservation request waits on the inventory queue.",
        [["intake"], ["command"]],
        [Shape("agent-request_d227dda_do", "agent-request",
               "do request of the first release: Idempotency-Key <order>.<step>.do, no "
               "compensates, no outbox_seq", ("queue", "inventory"))],
        PROCESSED),
    Scenario(
        "d227dda-reply-queued", "d227dda",
        "Reserved; the Agent's reply waits on the responses queue.",
        [["intake"], ["command"], ["agent", "inventory"]],
        [Shape("agent-reply_d227dda_ok", "agent-reply",
               "do reply of the first release: no outbox_seq, no traceparent",
               ("queue", "responses"))],
        PROCESSED),
    Scenario(
        "d227dda-undo-queued", "d227dda",
        "Reserved, then the charge was refused: the undo of the reservation waits on the "
        "inventory queue, naming its work only by its own key.",
        [["intake"], ["command"], ["agent", "inventory"], ["reply"],
         ["agent", "payment", "refuse"], ["reply"]],
        [Shape("agent-request_d227dda_undo", "agent-request",
               "undo request of the first release: Idempotency-Key <order>.<step>.undo and no "
               "compensates (the work is read off the key: legacy_compensates)",
               ("queue", "inventory"))],
        COMPENSATED),
    Scenario(
        "d227dda-undo-reply-queued", "d227dda",
        "As d227dda-undo-queued, the reservation released; its reply waits.",
        [["intake"], ["command"], ["agent", "inventory"], ["reply"],
         ["agent", "payment", "refuse"], ["reply"], ["agent", "inventory"]],
        [Shape("agent-reply_d227dda_undo-ok", "agent-reply",
               "undo reply of the first release", ("queue", "responses"))],
        COMPENSATED),
    Scenario(
        "d227dda-non-ascii-order", "d227dda",
        "An order with non-ASCII text, stored ASCII-escaped with the first release's "
        "fingerprint; its sender's message is delivered again after the upgrade, which must "
        "read as the same order (a duplicate), not a conflict.",
        [["intake"], ["command"], ["agent", "inventory"], ["reply"]],
        [Shape("order-row_d227dda_ascii-escaped", "order-row",
               "order row of the first release: Document ASCII-escaped, Fingerprint of the "
               "order without a workflow field", ("table", "OrderState", "order"))],
        PROCESSED, after={"redeliver_order": True},
        order={"customer_id": "Zoë Ångström",
               "items": [{"sku": "THÉ-1", "quantity": 1, "unit_price": "4.50"}]}),
    # --- resubmission: generations, history (3cde319), FailedStep (dff45f2) -----------------
    Scenario(
        "3cde319-resubmitted-unknown-key", "3cde319",
        "Generation 0 failed at shipping and the refund of the charge was refused, so the "
        "compensation failed with the reservation still completed; an operator resubmitted. "
        "Generation 1 is charging (its request on the queue) when the release is replaced, and "
        "shipping then refuses. The reservation's work was done in generation 0 under a key "
        "no record holds: its undo must go to an operator, naming the step.",
        [["intake"], ["command"], ["agent", "inventory"], ["reply"], ["agent", "payment"],
         ["reply"], ["agent", "shipping", "refuse"], ["reply"],
         ["agent", "payment", "refuse"], ["reply"], ["resubmit"], ["command"]],
        [_record("state-record_3cde319_resubmitted-completed-in-gen0",
                 "state record with Resubmissions and History (3cde319), no work keys: a step "
                 "completed in an earlier generation"),
         Shape("agent-request_3cde319_do-generation-1", "agent-request",
               "do request of a resubmitted order: Idempotency-Key <order>.<step>.g1.do",
               ("queue", "payment"))],
        {"ProcessState": "Error", "Compensation": "Failed",
         "alert": {"kind": "CompensationFailed", "step": "reserve_inventory",
                   "reason": "never recorded"},
         # Left by the release before: the reservation (its key unknown) and the generation-0
         # charge whose refund that release saw refused. Nothing stands twice.
         "standing": {"reserve_inventory": 1, "charge_payment": 1}},
        after={"refuse": ["shipping/ship"]}),
    Scenario(
        "3cde319-undo-generation-1", "3cde319",
        "Generation 0 was refused at once; resubmitted, generation 1 reserved and was refused "
        "the charge: the undo of generation 1's reservation waits on the queue.",
        [["intake"], ["command"], ["agent", "inventory", "refuse"], ["reply"], ["resubmit"],
         ["command"], ["agent", "inventory"], ["reply"], ["agent", "payment", "refuse"],
         ["reply"]],
        [Shape("agent-request_3cde319_undo-generation-1", "agent-request",
               "undo request of a resubmitted order: Idempotency-Key <order>.<step>.g1.undo, "
               "no compensates", ("queue", "inventory"))],
        COMPENSATED),
    Scenario(
        "dff45f2-undo-queued", "dff45f2",
        "The charge was refused (FailedStep recorded); the undo of the reservation waits.",
        [["intake"], ["command"], ["agent", "inventory"], ["reply"],
         ["agent", "payment", "refuse"], ["reply"]],
        [_record("state-record_dff45f2_failed-step",
                 "state record with FailedStep (dff45f2), no work keys: the refused step "
                 "failed, an earlier one compensating")],
        COMPENSATED),
    Scenario(
        "dff45f2-undo-lost", "dff45f2",
        "As dff45f2-undo-queued, but the undo of the reservation was lost: the compensation "
        "times out and the Supervisor hands it on. Releases before ee77eee left a refused "
        "step failed and undid only the steps before it; this one undoes a failed step too.",
        [["intake"], ["command"], ["agent", "inventory"], ["reply"],
         ["agent", "payment", "refuse"], ["reply"], ["drop", "inventory"]],
        [_record("state-record_dff45f2_compensation-timed-out",
                 "state record with FailedStep (dff45f2), no work keys: an earlier step "
                 "compensating and timed out, a later one failed and never undone")],
        COMPENSATED, supervised=True),
    # --- work keys, outbox, rescues (75e3701); inflight/<id>@<generation> --------------------
    Scenario(
        "75e3701-dispatch-unconfirmed", "75e3701",
        "The Scheduler claimed the order and wrote the dispatch in its outbox, then could not "
        "send it (the queue was gone): the request was never sent.",
        [["intake"], ["break", "inventory"], ["fails", "command"], ["mend", "inventory"]],
        [_record("state-record_75e3701_outbox-dispatch-unconfirmed",
                 "state record with work keys, Outbox/OutboxSeq/OutboxCause and Rescues "
                 "(75e3701), no TraceParent, IndexKey or SchemaVersion")],
        {**PROCESSED, "FailureCount": 0}, supervised=True),
    Scenario(
        "75e3701-start-lost", "75e3701",
        "Accepted, but the start command was lost: only the index entry names the order.",
        [["intake"], ["drop", "scheduler"]],
        [_entry("index-entry_75e3701_inflight-order-generation",
                "in-flight entry inflight/<OrderID>@<generation> with OrderID, Generation, "
                "Since (75e3701)"),
         _entry("index-entry_75e3701_key-only",
                "the same entry with no properties but its key: how the Supervisor reads an "
                "entry whose properties are gone (made readable by d67d9fe)",
                strip=("OrderID", "Generation", "Since"))],
        PROCESSED, supervised=True),
    Scenario(
        "75e3701-quarantined", "75e3701",
        "The start command was lost, and the record was unreadable for a while: that "
        "release's Supervisor marked the entry Unreadable with the record's ETag. The record "
        "has been repaired since.",
        [["intake"], ["drop", "scheduler"], ["corrupt"], ["tick", 11], ["repair"]],
        [_entry("index-entry_75e3701_unreadable",
                "in-flight entry inflight/<OrderID>@<generation> carrying Unreadable: the "
                "ETag of a record version reported unreadable (75e3701)")],
        PROCESSED, supervised=True),
    Scenario(
        "75e3701-retry-queued", "75e3701",
        "The reservation request was lost; the Supervisor counted a failure and queued a "
        "retry after its backoff.",
        [["intake"], ["command"], ["drop", "inventory"], ["tick", 31]],
        [Shape("scheduler-command_75e3701_start-retry", "scheduler-command",
               "start command with outbox_seq (75e3701), no traceparent",
               ("queue", "scheduler"))],
        PROCESSED, settle_seconds=2.5),
    Scenario(
        "75e3701-undo-queued", "75e3701",
        "Reserved, then the charge was refused: the undo of the reservation waits, with "
        "the undo key of those releases (<work key>.undo).",
        [["intake"], ["command"], ["agent", "inventory"], ["reply"],
         ["agent", "payment", "refuse"], ["reply"]],
        [Shape("agent-request_75e3701_undo-compensates", "agent-request",
               "undo request with compensates and outbox_seq, Idempotency-Key "
               "<order>.<step>.do.undo (75e3701 to ea50bdd)", ("queue", "inventory"))],
        COMPENSATED),
    Scenario(
        "75e3701-refused-in-doubt", "75e3701",
        "The first charge call timed out after the charge was made; the next was refused. "
        "The reply says permanent_error with in_doubt (a field dropped by ee77eee): the charge "
        "stands at the service and must be undone.",
        [["intake"], ["command"], ["agent", "inventory"], ["reply"],
         ["agent", "payment", "lost", "refuse"]],
        [Shape("agent-reply_75e3701_refused-in-doubt", "agent-reply",
               "permanent_error reply with in_doubt and outbox_seq (75e3701 to ee77eee)",
               ("queue", "responses"))],
        COMPENSATED),
    # --- tracing (d46d888) -----------------------------------------------------------------
    Scenario(
        "d46d888-retry-waiting", "d46d888",
        "The reservation was made but its answer never came; the Supervisor counted a "
        "failure and queued a retry: the step is not started and in doubt.",
        [["intake"], ["command"], ["agent", "inventory", "lost"], ["tick", 1]],
        [_record("state-record_d46d888_retry-waiting-in-doubt",
                 "state record with TraceParent (d46d888), no IndexKey or SchemaVersion; a "
                 "step waiting for its retry, in doubt"),
         Shape("scheduler-command_d46d888_traceparent", "scheduler-command",
               "start command with traceparent (d46d888)", ("queue", "scheduler"))],
        PROCESSED, settle_seconds=2.5),
    Scenario(
        "d46d888-request-and-reply", "d46d888",
        "Reserved (its reply waiting) ... in flight with trace context.",
        [["intake"], ["command"], ["agent", "inventory"]],
        [Shape("agent-reply_d46d888_traceparent", "agent-reply",
               "do reply with outbox_seq and traceparent (d46d888 on)", ("queue", "responses"))],
        PROCESSED),
    Scenario(
        "d46d888-request-queued", "d46d888",
        "Claimed; the reservation request waits, with its trace context.",
        [["intake"], ["command"]],
        [Shape("agent-request_d46d888_traceparent", "agent-request",
               "do request with outbox_seq and traceparent (d46d888 on)",
               ("queue", "inventory"))],
        PROCESSED),
    # --- the due-time index (c6c8f05, d67d9fe) ----------------------------------------------
    Scenario(
        "c6c8f05-reply-queued", "c6c8f05",
        "Reserved; the reply waits. Record and index of the due-time index's first release.",
        [["intake"], ["command"], ["agent", "inventory"]],
        [_record("state-record_c6c8f05_indexkey",
                 "state record with IndexKey (c6c8f05), no SchemaVersion, Timeline, "
                 "Workflow")],
        PROCESSED),
    Scenario(
        "c6c8f05-request-lost", "c6c8f05",
        "Claimed; the reservation request was lost: the due-time entry brings the Supervisor.",
        [["intake"], ["command"], ["drop", "inventory"]],
        [_entry("index-entry_c6c8f05_due",
                "due-time entry due-NN/<time>|<OrderID>@<generation> with OrderID, "
                "Generation, Since, Base (c6c8f05)")],
        PROCESSED, supervised=True),
    Scenario(
        "c6c8f05-quarantined", "c6c8f05",
        "The start command was lost and the record was unreadable for a while: that "
        "release's Supervisor marked its due-time entry Unreadable in place. Repaired since.",
        [["intake"], ["drop", "scheduler"], ["corrupt"], ["tick", 11], ["repair"]],
        [_entry("index-entry_c6c8f05_unreadable",
                "due-time entry carrying Unreadable in place (c6c8f05)")],
        PROCESSED, supervised=True),
    Scenario(
        "d67d9fe-quarantined", "d67d9fe",
        "The reservation request was lost and the record was unreadable for a while: that "
        "release's Supervisor filed the entry aside (recheck time) with Base and Unreadable. "
        "Repaired since.",
        [["intake"], ["drop", "inventory"], ["corrupt"], ["tick", 31], ["repair"]],
        [_entry("index-entry_d67d9fe_filed-aside",
                "entry filed aside for an unreadable record: Base = Unreadable = its ETag, "
                "filed at the recheck time (d67d9fe)")],
        PROCESSED, supervised=True),
    # --- schema version 2 (ea50bdd), timeline (0ccd175), workflows (0e928ad) ----------------
    Scenario(
        "ea50bdd-compensating", "ea50bdd",
        "Reserved and charged, then shipping refused: the compensation runs, an undo waiting.",
        [["intake"], ["agent", "inventory"], ["reply"], ["agent", "payment"], ["reply"],
         ["agent", "shipping", "refuse"], ["reply"]],
        [_record("state-record_ea50bdd_schema-2-compensating",
                 "state record with SchemaVersion 2 (ea50bdd), no Timeline or Workflow"),
         Shape("agent-request_ea50bdd_undo", "agent-request",
               "undo request with compensates and Idempotency-Key <order>.<step>.undo "
               "(ea50bdd on)", ("queue", "shipping"))],
        COMPENSATED),
    Scenario(
        "0ccd175-shipping-queued", "0ccd175",
        "Reserved and charged; the shipping request waits.",
        [["intake"], ["agent", "inventory"], ["reply"], ["agent", "payment"], ["reply"]],
        [_record("state-record_0ccd175_timeline",
                 "state record with Timeline (0ccd175), no Workflow or WorkflowVersion")],
        PROCESSED),
    Scenario(
        "0e928ad-given-up", "0e928ad",
        "Both reservation requests lost; the Supervisor gave up and queued the compensation.",
        [["intake"], ["drop", "inventory"], ["tick", 31], ["command"], ["drop", "inventory"],
         ["tick", 31]],
        [_record("state-record_0e928ad_workflow",
                 "state record naming its Workflow and WorkflowVersion (0e928ad)")],
        COMPENSATED, settle_seconds=2.5),
    # --- a second workflow (14ccb65) ------------------------------------------------------
    Scenario(
        "14ccb65-digital-link-queued", "14ccb65",
        "An order of the second workflow (digital-delivery): charged; the request to send the "
        "download link waits on the email service's queue.",
        [["intake"], ["agent", "payment"], ["reply"]],
        [_record("state-record_14ccb65_digital-delivery",
                 "state record naming the second workflow, digital-delivery (14ccb65): its "
                 "steps charge_payment and send_download_link, the second without an undo"),
         Shape("agent-request_14ccb65_email-send", "agent-request",
               "do request to the email service, a service of the second workflow (14ccb65)",
               ("queue", "email"))],
        DIGITAL_PROCESSED, order={"workflow": "digital-delivery"}),
    # --- attempt tokens (4ec0fd8) ----------------------------------------------------------
    Scenario(
        "4ec0fd8-request-queued", "4ec0fd8",
        "Claimed; the reservation request waits on the inventory queue, carrying the token "
        "its attempt holds on the record. This release's Agent must judge it in flight (not "
        "forged) and the Scheduler take its reply.",
        [["intake"]],
        [_record("state-record_4ec0fd8_step-token",
                 "state record whose step in flight carries its attempt's token (Steps[].token, "
                 "4ec0fd8)"),
         Shape("agent-request_4ec0fd8_token", "agent-request",
               "do request carrying its attempt's token (4ec0fd8)", ("queue", "inventory"))],
        PROCESSED),
    Scenario(
        "4ec0fd8-reply-queued", "4ec0fd8",
        "Reserved; the Agent's reply, echoing its request's token, waits on the responses "
        "queue: this release's Scheduler must take it as the attempt's own, not refuse it.",
        [["intake"], ["agent", "inventory"]],
        [Shape("agent-reply_4ec0fd8_token", "agent-reply",
               "do reply echoing its request's token (4ec0fd8)", ("queue", "responses"))],
        PROCESSED),
    # --- the last landed release (ce05056) --------------------------------------------------
    Scenario(
        "ce05056-compensating", "ce05056",
        "Reserved and charged, then shipping refused: the compensation runs, the undo of the "
        "refused step waiting with its attempt's token.",
        [["intake"], ["agent", "inventory"], ["reply"], ["agent", "payment"], ["reply"],
         ["agent", "shipping", "refuse"], ["reply"]],
        [_record("state-record_ce05056_compensating-token",
                 "state record of the last landed release (ce05056), mid-compensation: the "
                 "step being undone carries its undo attempt's token"),
         Shape("agent-request_ce05056_undo-token", "agent-request",
               "undo request carrying its attempt's token (ce05056)", ("queue", "shipping"))],
        COMPENSATED),
    Scenario(
        "ce05056-undo-reply-queued", "ce05056",
        "As ce05056-compensating, the shipping undo done; its reply, echoing the token, waits.",
        [["intake"], ["agent", "inventory"], ["reply"], ["agent", "payment"], ["reply"],
         ["agent", "shipping", "refuse"], ["reply"], ["agent", "shipping"]],
        [Shape("agent-reply_ce05056_undo-token", "agent-reply",
               "undo reply echoing its request's token (ce05056)", ("queue", "responses"))],
        COMPENSATED),
    Scenario(
        "ce05056-retry-waiting", "ce05056",
        "The reservation request was lost; the Supervisor counted a failure and queued a "
        "retry: the record keeps the lost attempt's token on a step not in flight.",
        [["intake"], ["drop", "inventory"], ["tick", 31]],
        [_record("state-record_ce05056_retry-waiting-token",
                 "state record (ce05056) whose step waits for its retry, the token of its lost "
                 "attempt still on it"),
         Shape("scheduler-command_ce05056_start-retry", "scheduler-command",
               "start command of the last landed release (ce05056)", ("queue", "scheduler"))],
        {**PROCESSED, "FailureCount": 1}, settle_seconds=2.5),
]


def _subject(commit: str) -> str:
    return subprocess.run(["git", "log", "-1", "--format=%s", commit], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()


def _release(commit: str, into: Path) -> Path:
    tree = into / commit
    if not tree.exists():
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", commit, "shared"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _env(connection: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    t = uuid.uuid4().hex[:10]
    roles = {"scheduler": f"sched-{t}", "responses": f"replies-{t}",
             "inventory": f"inventory-{t}", "payment": f"payment-{t}",
             "shipping": f"shipping-{t}", "email": f"email-{t}"}
    tables = {"OrderState": f"State{t}", "OrdersInFlight": f"InFlight{t}"}
    env = {
        "AzureWebJobsStorage": connection, "ServiceBusConnection": "local",
        "SchedulerQueueName": roles["scheduler"], "AgentResponsesQueueName": roles["responses"],
        "InventoryRequestsQueueName": roles["inventory"],
        "PaymentRequestsQueueName": roles["payment"],
        "ShippingRequestsQueueName": roles["shipping"],
        "EmailRequestsQueueName": roles["email"],  # the second workflow's service (14ccb65 on)
        "StateTableName": tables["OrderState"], "InFlightTableName": tables["OrdersInFlight"],
        "RejectedOrdersTableName": f"Rejected{t}", "OperatorAlertsTableName": f"Alerts{t}",
        "SimulatorTableName": f"Effects{t}", "SchedulerInstanceId": "scheduler-before",
        "FailureThreshold": "2", "RetryBackoffSeconds": "1", "RetryBackoffMaxSeconds": "2",
        "PendingGraceSeconds": "10", "AgentRetryBaseSeconds": "0.05",
        "AgentRetryMaxSeconds": "0.3", "OutageGapSeconds": "86400",
        "SupervisorSchedule": "*/10 * * * * *", "SimulatorsEnabled": "true",
        "PATH": os.environ.get("PATH", ""),
    }
    return env, roles, tables


def _pick(snapshot: dict[str, Any], where: tuple[str, ...]) -> dict[str, Any]:
    """Take the shape out of the snapshot (the rest stays as its context)."""
    if where[0] == "queue":
        (body,) = snapshot["queues"][where[1]]
        snapshot["queues"][where[1]] = []
        return body
    rows = snapshot["tables"][where[1]]
    if len(where) > 2:
        (row,) = [r for r in rows if r["RowKey"] == where[2]]
    else:
        (row,) = [r for r in rows if r["PartitionKey"] != "supervisor"]
    rows.remove(row)
    return row


def generate(scenario: Scenario, workdir: Path, connection: str) -> list[Path]:
    tree = _release(scenario.commit, workdir)
    env, roles, tables = _env(connection)
    order_id = f"up-{scenario.name}"
    spec = {"env": env, "roles": roles, "tables": tables, "script": scenario.script,
            "order": {"order_id": order_id, **ORDER, **scenario.order},
            "settle_seconds": scenario.settle_seconds}
    run = subprocess.run([sys.executable, str(RUNNER), json.dumps(spec)], cwd=tree,
                         env={**env, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"},
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{scenario.name} at {scenario.commit} failed:\n{run.stderr[-4000:]}")
    snapshot = json.loads(run.stdout.strip().splitlines()[-1])
    # The Supervisor's tick log is its own record, not the order's.
    snapshot["tables"]["OrdersInFlight"] = [
        e for e in snapshot["tables"]["OrdersInFlight"] if e["PartitionKey"] != "supervisor"]
    written = []
    for shape in scenario.shapes:
        context = json.loads(json.dumps(snapshot))
        item = _pick(context, shape.where)
        for prop in shape.strip:
            item.pop(prop, None)
            item.pop(f"{prop}@odata.type", None)
        key = "message" if shape.where[0] == "queue" else "entity"
        where = ({"queue": shape.where[1]} if shape.where[0] == "queue"
                 else {"table": shape.where[1]})
        fixture = {
            "commit": scenario.commit,
            "commit_subject": _subject(scenario.commit),
            "kind": shape.kind,
            "shape": shape.shape,
            "description": scenario.description,
            "order_id": order_id,
            "where": where,
            key: item,
            "context": {"now": context["now"], "tables": context["tables"],
                        "queues": {k: v for k, v in context["queues"].items() if v}},
            "work_done": context["services"],
            "after_upgrade": scenario.after,
            "expect": {**scenario.expect,
                       **({} if scenario.supervised else {"supervisor_recoveries": 0})},
            "written_by": f"tests/upgrade/make_fixtures.py, scenario {scenario.name!r}: the "
                          f"code of {scenario.commit} (git archive), run against Azurite",
        }
        path = FIXTURES / f"{shape.file}.json"
        path.write_text(json.dumps(fixture, indent=2, ensure_ascii=False) + "\n")
        written.append(path)
    return written


def main(names: list[str]) -> None:
    from localrun.azurite import Azurite

    chosen = [s for s in SCENARIOS if not names or s.name in names]
    FIXTURES.mkdir(exist_ok=True)
    az = Azurite.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for scenario in chosen:
                for path in generate(scenario, Path(tmp), az.connection_string):
                    print(f"{scenario.commit}  {path.relative_to(ROOT)}")
    finally:
        az.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
