"""Where the Supervisor keeps its record of completed ticks (see shared/domain/outages.py).

One entity beside the due-time index (its own partition, so the index queries never read it):
one read and one conditional write per tick.
"""

from __future__ import annotations

from typing import Protocol

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableClient

from shared.adapters.versioned import put_at_version
from shared.domain.outages import TickLog

TICKS_PARTITION = "supervisor"
TICKS_ROW = "ticks"


class TickLogStore(Protocol):
    def read(self) -> tuple[TickLog, str | None]:
        """The record and its version (None when there is none yet)."""
        ...

    def write(self, log: TickLog, version: str | None) -> None:
        """Replace the record read at ``version``; ConcurrencyConflict if it moved on."""
        ...


class TableTickLog:
    def __init__(self, table: TableClient) -> None:
        self._table = table

    def read(self) -> tuple[TickLog, str | None]:
        try:
            e = self._table.get_entity(TICKS_PARTITION, TICKS_ROW)
        except ResourceNotFoundError:
            return TickLog(), None
        return TickLog.from_parts(e.get("LastTick"), e.get("Gaps")), e.metadata["etag"]

    def write(self, log: TickLog, version: str | None) -> None:
        entity = {"PartitionKey": TICKS_PARTITION, "RowKey": TICKS_ROW,
                  "LastTick": log.last_tick, "Gaps": log.gaps_to_json()}
        put_at_version(self._table, entity, version, "supervisor tick log")
