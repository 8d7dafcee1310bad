"""Where re-drives are kept (shared/domain/redrive.py): one entity each, in a partition of their
own beside the due-time index (the index queries never read it), newest first by id, each
written only at the version it was read at. The record is one JSON property, its shape
versioned; the state is a column too, so the runner reads only the active ones."""

from __future__ import annotations

import itertools
import logging
from typing import Any, Protocol

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableClient
from pydantic import ValidationError

from shared.adapters.versioned import put_at_version
from shared.domain.redrive import SCHEMA_VERSION, Redrive, RedriveState

log = logging.getLogger(__name__)

REDRIVES_PARTITION = "redrives"
# Pages a listing follows at most.
LIST_PAGES = 10


class RedriveStore(Protocol):
    def read(self, redrive_id: str) -> tuple[Redrive | None, str | None]:
        """The re-drive and its version; (None, None) when there is none, (None, version)
        for a record this release cannot read (a newer release's: left alone)."""
        ...

    def write(self, redrive: Redrive, version: str | None) -> str:
        """Create it (``version`` None) or replace it at ``version``: its new version;
        ConcurrencyConflict when it moved on."""
        ...

    def listed(self, limit: int, active_only: bool = False) -> list[tuple[Redrive, str]]:
        """The newest re-drives (only running and paused ones when ``active_only``), each with
        its version; records this release cannot read are left out."""
        ...


def to_entity(redrive: Redrive) -> dict[str, Any]:
    return {"PartitionKey": REDRIVES_PARTITION, "RowKey": redrive.id,
            "SchemaVersion": SCHEMA_VERSION, "State": redrive.state.value,
            "Record": redrive.model_dump_json()}


def from_entity(e: Any) -> Redrive | None:
    if e.get("SchemaVersion") != SCHEMA_VERSION:
        return None
    try:
        return Redrive.model_validate_json(str(e.get("Record") or ""))
    except ValidationError:
        log.warning("re-drive %s: a record this release cannot read; left alone",
                    e.get("RowKey"))
        return None


class TableRedrives:
    def __init__(self, table: TableClient) -> None:
        self._table = table

    def read(self, redrive_id: str) -> tuple[Redrive | None, str | None]:
        try:
            e = self._table.get_entity(REDRIVES_PARTITION, redrive_id)
        except ResourceNotFoundError:
            return None, None
        return from_entity(e), e.metadata["etag"]

    def write(self, redrive: Redrive, version: str | None) -> str:
        return put_at_version(self._table, to_entity(redrive), version,
                              f"re-drive {redrive.id}")

    def listed(self, limit: int, active_only: bool = False) -> list[tuple[Redrive, str]]:
        query, params = "PartitionKey eq @p", {"p": REDRIVES_PARTITION}
        if active_only:
            # The SDK finds parameters between spaces: none may touch a parenthesis.
            query += " and ( State eq @running or State eq @paused )"
            params |= {"running": RedriveState.RUNNING.value,
                       "paused": RedriveState.PAUSED.value}
        # Filtered on a property, the service may answer a page short, or empty, while it
        # reads on: the pages are followed (a few) until ``limit`` are found.
        found: list[tuple[Redrive, str]] = []
        pages = self._table.query_entities(query, parameters=params,
                                           results_per_page=limit).by_page()
        for page in itertools.islice(pages, LIST_PAGES):
            found += [(r, str(e.metadata["etag"])) for e in page
                      if (r := from_entity(e)) is not None]
            if len(found) >= limit:
                break
        return found[:limit]
