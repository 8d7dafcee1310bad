"""The state record's one serialisation: an OrderState to its table entity and back, reading
any release's shape (shared/domain/legacy.py), and what a record this release cannot read is."""

from __future__ import annotations

import json
from typing import Any

from shared.domain import legacy
from shared.domain.effects import outbox_from_json, outbox_to_json
from shared.domain.legacy import SCHEMA_VERSION
from shared.domain.state import (
    CompensationState,
    OrderState,
    ProcessState,
    StepState,
    schema_of,
)
from shared.domain.workflow import UnknownWorkflow

STATE_ROW = "state"


class CorruptRecord(Exception):
    """A state record this code cannot read. ``version`` tells a repaired record from this one."""

    def __init__(self, order_id: str, version: str, reason: str) -> None:
        super().__init__(f"state record of {order_id} is unreadable: {reason}")
        self.order_id = order_id
        self.version = version
        self.reason = reason


class NewerRecord(CorruptRecord, UnknownWorkflow):
    """A record a newer release wrote (its SchemaVersion above this release's) in a shape this
    release cannot read: a value it does not know, say. It is not corrupt, only not ours: the
    Scheduler defers its messages and the Supervisor leaves it (UnknownWorkflow, ``newer``), a
    listing skips it, as for an unreadable record, and nothing reports it as broken."""

    def __init__(self, order_id: str, version: str, schema: int, reason: str) -> None:
        CorruptRecord.__init__(self, order_id, version,
                               f"written by a newer release (schema {schema}): {reason}")
        self.newer = True


def state_to_entity(state: OrderState) -> dict[str, Any]:
    current = state.current_step
    entity: dict[str, Any] = {
        "PartitionKey": state.order_id,
        "RowKey": STATE_ROW,
        "SchemaVersion": schema_of(state),
        "OrderID": state.order_id,
        "Workflow": state.workflow,
        "WorkflowVersion": state.workflow_version,
        "LockedBy": state.locked_by,
        "CompleteBy": state.complete_by,
        "ProcessState": state.process_state.value,
        "FailureCount": state.failure_count,
        "CurrentStep": current.name if current else None,
        "Compensation": state.compensation.value if state.compensation else None,
        "CompensationFailureCount": state.compensation_failure_count,
        "Steps": json.dumps([s.to_dict() for s in state.steps], ensure_ascii=False),
        "ReplyTo": state.reply_to,
        "MessageId": state.message_id,
        "LastError": state.last_error,
        "FailedStep": state.failed_step,
        "Resubmissions": state.generation,
        "History": json.dumps(state.history, ensure_ascii=False) if state.history else None,
        "Timeline": json.dumps(state.timeline, ensure_ascii=False) if state.timeline else None,
        "Outbox": outbox_to_json(state.outbox),
        "OutboxSeq": state.outbox_seq,
        "OutboxCause": state.outbox_cause,
        "Rescues": state.rescues,
        "Held": state.held,
        "TraceParent": state.trace,
        "IndexKey": state.index_key,
        "CreatedAt": state.created_at,
        "UpdatedAt": state.updated_at,
    }
    # Table Storage has no null: an absent property is how a field reads as null.
    return {k: v for k, v in entity.items() if v is not None}


def state_from_entity(e: Any) -> OrderState:
    try:
        return _state_from_entity(e)
    except (KeyError, ValueError, TypeError) as err:  # pydantic's errors are ValueErrors
        schema = e.get("SchemaVersion")
        schema = int(schema) if isinstance(schema, int | str) and str(schema).isdigit() else 0
        if schema > SCHEMA_VERSION:
            # Read before anything else is trusted: the version says whose rules these are.
            raise NewerRecord(str(e.get("PartitionKey")), e.metadata["etag"], schema,
                              str(err)[:500]) from None
        raise CorruptRecord(str(e.get("PartitionKey")), e.metadata["etag"],
                            f"{type(err).__name__}: {err}"[:500]) from None


def _state_from_entity(e: Any) -> OrderState:
    comp = e.get("Compensation")
    steps = json.loads(e["Steps"])
    state = OrderState(
        order_id=e["OrderID"],
        process_state=ProcessState(e["ProcessState"]),
        steps=[StepState.from_dict(d) for d in steps],
        created_at=e["CreatedAt"],
        updated_at=e["UpdatedAt"],
        locked_by=e.get("LockedBy"),
        complete_by=e.get("CompleteBy"),
        failure_count=int(e.get("FailureCount", 0)),
        compensation=CompensationState(comp) if comp else None,
        compensation_failure_count=int(e.get("CompensationFailureCount", 0)),
        reply_to=e.get("ReplyTo"),
        message_id=e.get("MessageId"),
        last_error=e.get("LastError"),
        failed_step=e.get("FailedStep"),
        generation=int(e.get("Resubmissions", 0)),
        history=json.loads(e["History"]) if e.get("History") else [],
        timeline=json.loads(e["Timeline"]) if e.get("Timeline") else [],
        outbox=outbox_from_json(e.get("Outbox")),
        outbox_seq=int(e.get("OutboxSeq", 0)),
        outbox_cause=e.get("OutboxCause"),
        rescues=int(e.get("Rescues", 0)),
        held=e.get("Held"),
        trace=e.get("TraceParent"),
        index_key=e.get("IndexKey"),
        workflow=e.get("Workflow"),
        workflow_version=int(e.get("WorkflowVersion", 1)),
        schema_version=int(e["SchemaVersion"]) if e.get("SchemaVersion") is not None else None,
        version=e.metadata["etag"],
    )
    # A record of any release reads as today's (shared/domain/legacy.py). The schema version is
    # not trusted for this: a release before it may have rewritten a newer record meanwhile.
    unkeyed = {d["name"] for d in steps if "work_key" not in d}
    if unkeyed:
        legacy.adopt_work_keys(state, unkeyed)
    return state
