"""Every message that crosses a queue, with a schema version.

Queues: Scheduler commands (start / compensate an order), Agent requests (one queue per Agent),
Agent replies (one shared response queue) and status updates to a submitter's reply queue.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: int = 1
    # The W3C trace context of the order's trace (README, Tracing); absent when not traced.
    traceparent: str | None = Field(None, description=(
        "W3C trace context (https://www.w3.org/TR/trace-context/) of the order's trace; a "
        "reader that cannot parse it starts a new trace, it does not refuse the message."))

    def to_json(self) -> str:
        return self.model_dump_json()


class CommandKind(StrEnum):
    START = "start"
    COMPENSATE = "compensate"


class Arrival(StrEnum):
    """How a message reached its handler."""
    QUEUED = "queued"  # its first delivery from a queue
    REDELIVERED = "redelivered"  # again: an earlier delivery failed or died
    HANDED_OVER = "handed_over"  # in this process, by the relay that carried out its outbox


class SchedulerCommand(_Message):
    kind: CommandKind
    order_id: str
    reason: str = ""
    # The state record's outbox that sent it: its arrival shows that outbox was carried out.
    outbox_seq: int | None = None


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
    # An undo names the key its step's work was done under, as recorded when the step ran.
    compensates: str | None = None
    # The state record's outbox that sent it; the reply carries it back.
    outbox_seq: int | None = None
    # A random value the record keeps for this attempt (StepState.token) and the reply echoes:
    # only who read the request can answer it. None from releases before it.
    token: str | None = None


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
    outbox_seq: int | None = None
    # The request's token, echoed (AgentRequest.token).
    token: str | None = None
    # Refused because a person must act first, and what (the step's declared words, or a code
    # service's NeedsPerson): the order is parked, not failed. A release before parking reads
    # the refusal alone.
    needs: str | None = None
    # Sent by earlier releases on a refusal after an earlier call may have done the work
    # (docs/upgrades.md, Agent reply): read, never written.
    in_doubt: SkipJsonSchema[bool] = Field(False, exclude=True)


StatusEvent = Literal[
    "received", "step_completed", "completed", "failed", "step_compensated", "compensated",
    "compensation_failed", "rejected", "cancelled", "parked",
]


class StatusUpdate(_Message):
    # The id the sender gave the order ("" on a rejection of a message that named none).
    order_id: str
    event: StatusEvent
    at: datetime
    # The same on every copy of this update: a receiver can drop a copy it has seen.
    event_id: str = ""
    step: str | None = None
    detail: str | None = None
    # The order message this answers (its Service Bus message id): one the receiver sent.
    message_id: str | None = None


def new_token() -> str:
    """An attempt's token: 128 random bits, which nobody guesses from outside the app."""
    return secrets.token_urlsafe(16)


def token_digest(token: str) -> str:
    """What the record keeps of a token once its request is known sent: enough to check an
    echo of it, nothing to echo."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def new_work_key(order_id: str, step: str, generation: int = 0) -> str:
    """The key a step's work is done under. Chosen once, when the step first runs, and recorded
    on the step: every attempt reuses it and its compensation names it. A resubmitted order
    (generation n) gets a new one only for work that was undone or refused."""
    resubmitted = f".g{generation}" if generation else ""
    return f"{order_id}.{step}{resubmitted}.do"


def undo_key(work_key: str) -> str:
    """The Idempotency-Key of the undo of the work done under ``work_key``.

    ``<order>.<step>[.g<n>].undo``: what the releases before recorded work keys used, so that
    an Agent of such a release, which reads the work an undo names off its key
    (``legacy_compensates``), names the right work during a rolling deployment.
    """
    return f"{work_key.removesuffix('.do')}.undo"


def legacy_compensates(undo_idempotency_key: str) -> str | None:
    """The work an undo request without ``compensates`` names, read off its own key
    (``<work>.undo`` names ``<work>.do``: docs/upgrades.md, Agent request), or None when the
    key is not an undo key of that shape."""
    if not undo_idempotency_key.endswith(".undo"):
        return None
    return f"{undo_idempotency_key.removesuffix('.undo')}.do"
