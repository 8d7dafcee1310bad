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


class RejectionStore(Protocol):
    def record(self, r: Rejection) -> None: ...


class TableRejectionStore:
    def __init__(self, table: TableClient) -> None:
        self._table = table

    def record(self, r: Rejection) -> None:
        # Keyed by content, so a redelivered message updates its own row instead of adding one.
        key = hashlib.sha256(r.message_id.encode() + b"\0" + r.body).hexdigest()[:40]
        self._table.upsert_entity({
            "PartitionKey": REJECTED_PARTITION,
            "RowKey": key,
            "Kind": r.kind,
            "Reason": r.reason[:8000],
            "MessageId": r.message_id[:1000],
            # Keep the body (truncated to stay under the 64 KiB property limit) so nothing is lost.
            "Body": r.body[:30000].decode("utf-8", errors="replace"),
            "BodyTruncated": len(r.body) > 30000,
            "DeliveryCount": r.delivery_count,
            "RejectedAt": r.at,
        }, mode=UpdateMode.REPLACE)
