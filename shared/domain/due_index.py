"""The due-time index: where the Supervisor finds the work that may be overdue.

Each in-flight order generation has an entry filed under a time at or before its due time, in one
of ``SHARDS`` partitions by order id, so a tick reads by key range only the entries whose time
has come. The rule every write keeps: docs/architecture.md, The due-time index.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shared.domain.state import OrderState, due_at

# Partitions the index is spread over, by order id, so that no one partition carries every
# order's writes.
SHARDS = 16
PARTITION_PREFIX = "due-"
# Entries written before the due-time index: one partition, no time. The Supervisor still reads
# it (one request a tick, empty once they are gone) and moves each under its order's due time.
LEGACY_PARTITION = "inflight"
_TIME = "%Y%m%dT%H%M%S.%fZ"  # fixed width, so the text sorts as the time does
_SEP = "|"  # never in an order id (ORDER_ID_PATTERN), allowed in a RowKey; sorts after digits


def shard(order_id: str) -> str:
    n = int.from_bytes(hashlib.sha256(order_id.encode()).digest()[:4], "big") % SHARDS
    return f"{PARTITION_PREFIX}{n:02d}"


def partitions() -> list[str]:
    return [f"{PARTITION_PREFIX}{n:02d}" for n in range(SHARDS)]


def _text(t: datetime) -> str:
    return t.astimezone(UTC).strftime(_TIME)


@dataclass(frozen=True)
class IndexKey:
    """An entry's key. The state record keeps it (``OrderState.index_key``), never recomputed, so
    dropping an entry is exact."""

    partition: str
    row: str

    def __str__(self) -> str:
        return f"{self.partition}/{self.row}"

    @classmethod
    def parse(cls, text: str) -> IndexKey:
        partition, _, row = text.partition("/")
        if not partition or not row:
            raise ValueError(f"not an index key: {text!r}")
        return cls(partition, row)

    @property
    def due(self) -> datetime | None:
        """The time the entry is filed under (None for an entry from before the index)."""
        if self.partition == LEGACY_PARTITION:
            return None
        return datetime.strptime(self.row.split(_SEP, 1)[0], _TIME).replace(tzinfo=UTC)


    def names(self) -> tuple[str, int | None] | None:
        """The order id and generation the key names, read from the key alone, or None when it
        names nothing this code knows. Entries of the first releases carried no properties but
        the key (``inflight / <OrderID>``: no generation, which then means "whichever the record
        is at"); later ones ``inflight / <OrderID>@<generation>``; today's put the time first.
        """
        named = self.row.split(_SEP, 1)[1] if _SEP in self.row else self.row
        order_id, at, generation = named.rpartition("@")
        if not at:
            return (named, None) if named else None
        if not order_id or not generation.isdigit():
            return None
        return order_id, int(generation)


def key_for(order_id: str, generation: int | None, due: datetime) -> IndexKey:
    """``generation`` None: an entry for whichever generation the record is at (see names)."""
    named = order_id if generation is None else f"{order_id}@{generation}"
    return IndexKey(shard(order_id), f"{_text(due)}{_SEP}{named}")


def legacy_key(order_id: str, generation: int) -> IndexKey:
    return IndexKey(LEGACY_PARTITION, f"{order_id}@{generation}")


def due_by(now: datetime) -> str:
    """The highest RowKey of an entry due at ``now``: every entry at or before it sorts below."""
    return f"{_text(now)}{_SEP}~"


def file_at(due: datetime, written: datetime, horizon: timedelta, *, exact: bool) -> datetime:
    """The time to file a new entry under: the due time, or earlier (within the horizon of the
    write) so that the order's next transitions need no new entry. ``exact`` for the
    Supervisor's own writes, which must not meet the entry again before its time.

    The horizon is the shortest of the pending grace and the step budgets: every due time a
    later write can set is at least that far ahead, so the fault-free path files one entry per
    order and never files it again, and an order that finishes in time is never visited."""
    return due if exact else min(due, written + horizon)


def key_to_file(state: OrderState, grace: timedelta, horizon: timedelta, *,
                exact: bool) -> IndexKey:
    """The key a store files a new entry for this state under (see file_at)."""
    at = file_at(due_at(state, grace), state.updated_at, horizon, exact=exact)
    return key_for(state.order_id, state.generation, at)


def write_needs_new_key(state: OrderState, grace: timedelta, *, move: bool) -> bool:
    """Whether writing this state must file a new entry first (see new_key_needed)."""
    due = None if state.is_settled else due_at(state, grace)
    return new_key_needed(state.index_key, due, move=move)


def new_key_needed(recorded: str | None, due: datetime | None, *, move: bool) -> bool:
    """Whether a write of a state due at ``due`` (None: settled) must put a new entry first.

    Settled: no (its entry is dropped when its effects are carried out). Otherwise yes when the
    record names none or one filed later than the new due time, or when the writer moves the
    entry on purpose (the Supervisor, which has just met it at its time).
    """
    if due is None:
        return False
    if move or recorded is None:
        return True
    filed = IndexKey.parse(recorded).due
    return filed is None or filed > due
