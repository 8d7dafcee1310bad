"""Where pauses are kept (shared/domain/pauses.py): one entity per paused-or-resumed target, in a
partition of their own beside the due-time index, so the index queries never read them.

The Supervisor reads them all once a tick. Agents and Schedulers read them through
``CachedPauses``: one query per instance at most every few seconds, whatever the traffic, so a
pause takes hold on every instance within that time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableClient

from shared.adapters.versioned import put_at_version
from shared.domain.pauses import LAG, Pause, PauseKind, Pauses, Target

PAUSES_PARTITION = "pauses"
# How stale an instance's view of the pauses may be: how long a pause takes to hold everywhere,
# and how long after a resume an Agent may still drop a request (the Supervisor allows for it).
CACHE_SECONDS = LAG.total_seconds()


class PauseStore(Protocol):
    def read_all(self) -> Pauses: ...

    def read(self, target: Target) -> tuple[Pause, str | None]:
        """The target's record and its version (None: never paused)."""
        ...

    def write(self, pause: Pause, version: str | None) -> None:
        """Replace the record read at ``version``; ConcurrencyConflict if it moved on."""
        ...


class PauseReader(Protocol):
    def current(self) -> Pauses: ...


def _row(target: Target) -> str:
    return target.key


def to_entity(pause: Pause) -> dict[str, Any]:
    entity = {"PartitionKey": PAUSES_PARTITION, "RowKey": _row(pause.target),
              "Kind": pause.target.kind.value, "Name": pause.target.name,
              "Since": pause.since, "By": pause.by, "Reason": pause.reason or None,
              "Ended": pause.ended_to_json()}
    return {k: v for k, v in entity.items() if v is not None}


def from_entity(e: Any) -> Pause | None:
    """The record, or None for an entity of no kind this release knows (left alone)."""
    try:
        target = Target(PauseKind(e["Kind"]), str(e["Name"]))
        return Pause(target, e.get("Since"), e.get("By"), e.get("Reason") or "",
                     Pause.ended_from_json(e.get("Ended")))
    except (KeyError, ValueError, TypeError):
        return None


class TablePauses:
    def __init__(self, table: TableClient) -> None:
        self._table = table

    def read_all(self) -> Pauses:
        found = (from_entity(e) for e in self._table.query_entities(
            "PartitionKey eq @p", parameters={"p": PAUSES_PARTITION}))
        return Pauses({p.target: p for p in found if p is not None})

    def read(self, target: Target) -> tuple[Pause, str | None]:
        try:
            e = self._table.get_entity(PAUSES_PARTITION, _row(target))
        except ResourceNotFoundError:
            return Pause(target), None
        return from_entity(e) or Pause(target), e.metadata["etag"]

    def write(self, pause: Pause, version: str | None) -> None:
        put_at_version(self._table, to_entity(pause), version, str(pause.target))


class CachedPauses:
    """The pauses as read at most ``seconds`` ago. A failed read is raised, as any storage
    failure of the message's handling is: the message is delivered again."""

    def __init__(self, store: PauseStore, seconds: float = CACHE_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._seconds = seconds
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._pauses = Pauses()

    def current(self) -> Pauses:
        with self._lock:
            now = self._monotonic()
            if self._read_at is None or now - self._read_at >= self._seconds:
                self._pauses = self._store.read_all()
                self._read_at = now
            return self._pauses
