"""Invalid and conflicting intake, recorded with the reason so an operator can find it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from azure.data.tables import TableClient, UpdateMode

REJECTED_PARTITION = "rejected"
INVALID = "invalid"
CONFLICT = "conflict"


@dataclass(frozen=True)
class Rejection:
    kind: str
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
        self._table.upsert_entity({
            "PartitionKey": REJECTED_PARTITION,
            "RowKey": rejection_row_key(r),
            "Kind": r.kind,
            "Reason": r.reason[:8000],
            "MessageId": r.message_id[:1000],
            # Keep the body (truncated to stay under the 64 KiB property limit) so nothing is lost.
            "Body": r.body[:30000].decode("utf-8", errors="replace"),
            "BodyTruncated": len(r.body) > 30000,
            "DeliveryCount": r.delivery_count,
            "RejectedAt": r.at,
        }, mode=UpdateMode.REPLACE)
