"""Invalid and conflicting intake, recorded with the reason so an operator can find it."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from azure.core.exceptions import AzureError, ResourceNotFoundError
from azure.data.tables import TableClient, UpdateMode

from shared.adapters.paging import decode_token, encode_token
from shared.domain import budget

log = logging.getLogger(__name__)

REJECTED_PARTITION = "rejected"
# Rows past their retention that one recorded rejection deletes: a flood of rejections drains
# what an earlier one left at the same pace it adds.
EXPIRE_PER_RECORD = 10
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


@dataclass(frozen=True)
class StoredRejection:
    """A rejection as kept: the body's start (BODY_KEPT), its whole size and digest."""
    rejected_at: datetime | None
    kind: RejectionKind
    message_id: str | None
    reason: str | None
    delivery_count: int | None = None
    body: str | None = None
    body_bytes: int | None = None
    body_sha256: str | None = None


class RejectionStore(Protocol):
    def record(self, r: Rejection) -> None: ...

    def page(self, limit: int, continuation: str | None, bodies: bool = True
             ) -> tuple[list[StoredRejection], str | None]:
        """Newest sent first, and the token of the next page (None: the last); without
        ``bodies``, none is read (``body`` None)."""
        ...

    def of_message(self, message_id: str) -> StoredRejection | None:
        """Why the message with this id was rejected, if it was."""
        ...


_COLUMNS = ["RejectedAt", "Kind", "MessageId", "Reason", "DeliveryCount", "Body", "BodyBytes",
            "BodySha256"]


def kept(r: Rejection) -> StoredRejection:
    """What is kept of a rejection: its texts within their budgets, the body's start (in
    UTF-16 units), and the whole body's size and digest, which name it."""
    return StoredRejection(
        rejected_at=r.at, kind=r.kind, message_id=budget.clip(r.message_id, 1_000),
        reason=budget.clip(r.reason, budget.ERROR_TEXT), delivery_count=r.delivery_count,
        body=budget.clip(r.body.decode("utf-8", errors="replace"), BODY_KEPT),
        body_bytes=len(r.body), body_sha256=hashlib.sha256(r.body).hexdigest())


def _stored(e: Any) -> StoredRejection:
    return StoredRejection(
        rejected_at=e.get("RejectedAt"), kind=RejectionKind(e.get("Kind")),
        message_id=e.get("MessageId"), reason=e.get("Reason"),
        delivery_count=e.get("DeliveryCount"), body=e.get("Body"),
        body_bytes=e.get("BodyBytes"), body_sha256=e.get("BodySha256"))


def _countdown(at: datetime) -> str:
    return f"{10**13 - int(at.timestamp() * 1000):013d}"


def rejection_row_key(r: Rejection) -> str:
    """Newest first (the key counts down from when the message was sent), and the same for every
    delivery of one message, so a redelivery updates its own row instead of adding one."""
    countdown = _countdown(r.sent_at or r.at)
    digest = hashlib.sha256(r.message_id.encode() + b"\0" + r.body).hexdigest()[:24]
    return f"{countdown}-{digest}"


class TableRejectionStore:
    """``retention``: how long a row is kept. Rejections come from outside, so the table would
    otherwise grow for as long as anyone sends; each one recorded deletes up to
    EXPIRE_PER_RECORD rows past their retention (the oldest sort last: one range query)."""

    def __init__(self, table: TableClient, retention: timedelta = timedelta(days=30)) -> None:
        self._table = table
        self._retention = retention

    def record(self, r: Rejection) -> None:
        k = kept(r)
        self._table.upsert_entity({
            "PartitionKey": REJECTED_PARTITION,
            "RowKey": rejection_row_key(r),
            "Kind": r.kind.value,
            "Reason": k.reason,
            "MessageId": k.message_id,
            # The body's start, within the property limit; its size and digest name the whole.
            "Body": k.body,
            "BodyTruncated": k.body != r.body.decode("utf-8", errors="replace"),
            "BodyBytes": k.body_bytes,
            "BodySha256": k.body_sha256,
            "DeliveryCount": r.delivery_count,
            "RejectedAt": r.at,
        }, mode=UpdateMode.REPLACE)
        self._expire(r.at - self._retention, r.at)

    def page(self, limit: int, continuation: str | None, bodies: bool = True
             ) -> tuple[list[StoredRejection], str | None]:
        columns = _COLUMNS if bodies else [c for c in _COLUMNS if c != "Body"]
        pages = self._table.query_entities(
            "PartitionKey eq @p", parameters={"p": REJECTED_PARTITION}, results_per_page=limit,
            select=columns).by_page(continuation_token=decode_token(continuation))
        rows = [_stored(e) for e in next(pages, [])]
        token = pages.continuation_token  # type: ignore[attr-defined]
        return rows, encode_token(token) if token else None

    def of_message(self, message_id: str) -> StoredRejection | None:
        for e in self._table.query_entities(
                "PartitionKey eq @p and MessageId eq @m",
                parameters={"p": REJECTED_PARTITION, "m": message_id}, select=_COLUMNS):
            return _stored(e)
        return None

    def _expire(self, before: datetime, now: datetime) -> None:
        # Rows sent before ``before`` count down past its key ("." sorts after "-", so one sent
        # in the same millisecond is kept): a range from the partition's old end. Of those, only
        # rows also recorded before it go (a message may be rejected long after it was sent).
        # Then rows keyed by a 40-character digest alone (docs/upgrades.md, RejectedOrders):
        # those that sort past the countdown fall in the first range, the others below any
        # countdown a message sent by now (give or take a day of clock skew) can have.
        ranges = [f"RowKey gt '{_countdown(before)}.'",
                  f"RowKey lt '{_countdown(now + timedelta(days=1))}'"]
        budget_left = EXPIRE_PER_RECORD
        try:
            for keys in ranges:
                query = (f"PartitionKey eq '{REJECTED_PARTITION}' and {keys} and "
                         "RejectedAt lt @before")
                page: Iterable[dict[str, Any]] = next(self._table.query_entities(
                    query, parameters={"before": before}, select=["PartitionKey", "RowKey"],
                    results_per_page=budget_left).by_page(), [])
                for key in [row["RowKey"] for row in page]:
                    with contextlib.suppress(ResourceNotFoundError):  # another intake's, at once
                        self._table.delete_entity(REJECTED_PARTITION, key)
                    budget_left -= 1
                if budget_left <= 0:
                    return
        except AzureError as e:  # the rejection itself is recorded; the next one tries again
            log.warning("expiring rejected orders: %s", e)
