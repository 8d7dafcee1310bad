"""The app's tables and queues as the rolling rehearsal reads them (rolling.py), unmetered, and
when an order's record counts as settled."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SETTLED_COMPENSATION = ("Done", "Failed")


def is_settled(s: Mapping[str, Any]) -> bool:
    return s.get("ProcessState") == "Processed" or (
        s.get("ProcessState") in ("Error", "Cancelled")
        and s.get("Compensation") in SETTLED_COMPENSATION)


@dataclass
class Store:
    """Unmetered clients on the app's tables and queues, for the watching and the verdict."""

    connection: str
    env: Mapping[str, str]

    def __post_init__(self) -> None:
        from azure.data.tables import TableServiceClient
        from azure.storage.queue import QueueServiceClient

        self.tables = TableServiceClient.from_connection_string(self.connection)
        self.queues = QueueServiceClient.from_connection_string(self.connection)

    def table(self, setting: str) -> list[dict[str, Any]]:
        return [dict(e) for e in
                self.tables.get_table_client(self.env[setting]).list_entities()]

    def states(self) -> dict[str, dict[str, Any]]:
        t = self.tables.get_table_client(self.env["StateTableName"])
        return {e["PartitionKey"]: dict(e) for e in t.query_entities("RowKey eq 'state'")}

    def index_entries(self) -> list[dict[str, Any]]:
        t = self.tables.get_table_client(self.env["InFlightTableName"])
        return [dict(e) for e in t.list_entities()
                if e["PartitionKey"].startswith("due-") or e["PartitionKey"] == "inflight"]

    def messages_in(self, suffix: str) -> dict[str, int]:
        """Messages waiting in each queue whose name ends with ``suffix``."""
        out = {}
        for q in self.queues.list_queues():
            if q.name.endswith(suffix):
                n = self.queues.get_queue_client(q.name).get_queue_properties() \
                    .approximate_message_count
                if n:
                    out[q.name] = n
        return out
