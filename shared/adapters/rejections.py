"""Invalid and conflicting intake, recorded with the reason so an operator can find it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from azure.data.tables import TableClient, UpdateMode

from shared.domain import budget

REJECTED_PARTITION = "rejected"
# What of a body is kept: its start, in UTF-16 units (its size and digest name the whole).
BODY_KEPT = 30_000


class RejectionKind(StrEnum):
    INVALID = "invalid"  # not an order, or not one this app takes
    CONFLICT = "conflict"  # an order id seen before with other content
    UNSTORABLE = "unstorable"  # a valid order storage refuses for what it holds


@dataclass(frozen=True)
class Rejection:
    kind: RejectionKind
    reason: str
    message_id: str
    body: bytes
    delivery_count: int
    at: datetime
    # When the message was sent (Service Bus's enqueued time): the same on every delivery of it.
    sent_at: datetime | None = None


class RejectionStore(Protocol):
    def record(self, r: Rejection) -> None: ...


def rejection_row_key(r: Rejection) -> str:
    """Newest first (the key counts down from when the message was sent), and the same for every
    delivery of one message, so a redelivery updates its own row instead of adding one."""
    countdown = 10**13 - int((r.sent_at or r.at).timestamp() * 1000)
    digest = hashlib.sha256(r.message_id.encode() + b"\0" + r.body).hexdigest()[:24]
    return f"{countdown:013d}-{digest}"


class TableRejectionStore:
    def __init__(self, table: TableClient) -> None:
        self._table = table

    def record(self, r: Rejection) -> None:
        body = r.body.decode("utf-8", errors="replace")
        kept = budget.clip(body, BODY_KEPT)
        self._table.upsert_entity({
            "PartitionKey": REJECTED_PARTITION,
            "RowKey": rejection_row_key(r),
            "Kind": r.kind.value,
            "Reason": budget.clip(r.reason, budget.ERROR_TEXT),
            "MessageId": budget.clip(r.message_id, 1_000),
            # The body's start, within the property limit; its size and digest name the whole.
            "Body": kept,
            "BodyTruncated": kept != body,
            "BodyBytes": len(r.body),
            "BodySha256": hashlib.sha256(r.body).hexdigest(),
            "DeliveryCount": r.delivery_count,
            "RejectedAt": r.at,
        }, mode=UpdateMode.REPLACE)
