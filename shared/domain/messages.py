"""Every message that crosses a queue, with a schema version.

Queues: Scheduler commands (start / compensate an order), Agent requests (one queue per Agent),
Agent replies (one shared response queue) and status updates to a submitter's reply queue.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: int = 1

    def to_json(self) -> str:
        return self.model_dump_json()


class CommandKind(StrEnum):
    START = "start"
    COMPENSATE = "compensate"


class SchedulerCommand(_Message):
    kind: CommandKind
    order_id: str
    reason: str = ""


class Action(StrEnum):
    DO = "do"
    UNDO = "undo"


class AgentRequest(_Message):
    order_id: str
    step: str
    action: Action
    operation: str
    attempt: int
    complete_by: AwareDatetime
    # The same on every attempt of this step and action, so the remote side can de-duplicate.
    idempotency_key: str
    order: dict[str, Any]


class ReplyOutcome(StrEnum):
    OK = "ok"
    PERMANENT_ERROR = "permanent_error"


class AgentReply(_Message):
    order_id: str
    step: str
    action: Action
    attempt: int
    outcome: ReplyOutcome
    error: str | None = None
    result: dict[str, Any] | None = None


StatusEvent = Literal[
    "received", "step_completed", "completed", "failed", "step_compensated", "compensated",
    "compensation_failed",
]


class StatusUpdate(_Message):
    order_id: str
    event: StatusEvent
    at: datetime
    step: str | None = None
    detail: str | None = None


def idempotency_key(order_id: str, step: str, action: Action, generation: int = 0) -> str:
    """Stable across attempts; a resubmitted order (generation n) is new work for the service."""
    resubmitted = f".g{generation}" if generation else ""
    return f"{order_id}.{step}{resubmitted}.{action.value}"
