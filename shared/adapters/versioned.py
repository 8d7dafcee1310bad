"""One entity written only at the version it was read at: the Supervisor's tick log, a pause.
A write that finds it changed (or created, or gone) since is a lost race, never an overwrite."""

from __future__ import annotations

from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import TableClient, UpdateMode

from shared.adapters.state_store import ConcurrencyConflict


def put_at_version(table: TableClient, entity: dict[str, Any], version: str | None,
                   what: str) -> str:
    """Create ``entity`` (``version`` None: read as absent) or replace it at ``version``, and
    return its new version; ConcurrencyConflict, naming ``what``, when it moved on."""
    try:
        if version is None:
            written = table.create_entity(entity)
        else:
            written = table.update_entity(entity, mode=UpdateMode.REPLACE, etag=version,
                                          match_condition=MatchConditions.IfNotModified)
    except (ResourceExistsError, ResourceModifiedError, ResourceNotFoundError) as e:
        raise ConcurrencyConflict(f"{what}: {e.reason}") from None
    return str(written["etag"])
