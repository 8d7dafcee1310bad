"""Counting what the app asks of storage: requests by service and operation, entities read.

A response hook in each Azure SDK client's pipeline (``raw_response_hook``, run by the pipeline's
hook policy on every response; the storage SDKs do not take extra per-call policies). bootstrap
passes the options in. This is the cloud bill in miniature: every Table and Queue request is a
billed transaction.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from azure.core.pipeline import PipelineResponse

from localrun.host.state import current_function
from localrun.servicebus import is_local_service_bus
from shared.domain.due_index import IndexKey

if TYPE_CHECKING:
    from azure.data.tables import TableClient

# The prefix of the stand-in's requests in the counts: "local_service_bus.delete", ...
SERVICE_BUS_STAND_IN = "local_service_bus"


def _operation(service: str, method: str, path: str, query: str) -> str:
    if service == "table":
        if path.endswith("$batch"):
            return "batch"
        if re.search(r"\(PartitionKey=.*RowKey=.*\)$", path):
            return {"GET": "read", "PUT": "write", "MERGE": "write", "PATCH": "write",
                    "DELETE": "delete"}.get(method, method)
        if method == "GET":
            return "query"
        if method == "POST":
            return "insert"
        return method.lower()
    # queue
    if path.endswith("/messages") or "/messages/" in path:
        if method == "POST":
            return "send"
        if method == "GET":
            return "peek" if "peekonly=true" in query.lower() else "receive"
        if method == "DELETE":
            return "delete"
        if method == "PUT":
            return "update"
    return method.lower()


class _ServiceHook:
    def __init__(self, meter: StorageMeter, service: str) -> None:
        self._meter = meter
        self._service = service

    def __call__(self, response: PipelineResponse[Any, Any]) -> None:
        http = response.http_request
        path, _, query = http.url.partition("?")
        entities = 0
        service = self._service
        op = _operation(service, http.method, path, query)
        if op == "receive" and b"<QueueMessage>" not in (response.http_response.body() or b""):
            op = "receive.empty"  # a poll that found nothing: time-driven, not per order
        if service == "queue" and any(is_local_service_bus(p) for p in path.split("/")):
            # The local host's Service Bus stand-in: Service Bus operations in Azure, billed
            # as such, not storage transactions. Azurite still serves them (the bench's bound).
            service = SERVICE_BUS_STAND_IN
        if (self._service == "table" and http.method == "GET"
                and response.http_response.status_code == 200):
            try:
                body = json.loads(response.http_response.body() or b"{}")
                entities = len(body["value"]) if "value" in body else 1
            except (ValueError, KeyError, TypeError):
                entities = 0
        self._meter.record(service, op, entities)


class StorageMeter:
    """Counters shared by a table policy and a queue policy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.by_function: Counter[tuple[str, str, str]] = Counter()
        self.entities_read = 0
        # Keyword arguments for the storage clients (Any: the SDKs type them loosely).
        self.table_options: dict[str, Any] = {"raw_response_hook": _ServiceHook(self, "table")}
        self.queue_options: dict[str, Any] = {"raw_response_hook": _ServiceHook(self, "queue")}

    def record(self, service: str, operation: str, entities: int) -> None:
        fn = current_function() or "-"
        with self._lock:
            self.requests[(service, operation)] += 1
            self.by_function[(fn, service, operation)] += 1
            self.entities_read += entities

    def absorb(self, per_function: dict[str, dict[str, int]], entities_read: int) -> None:
        """Add what another meter counted (a worker process's, host/worker.py), as its
        per_function() and snapshot() gave them."""
        with self._lock:
            for fn, ops in per_function.items():
                for key, n in ops.items():
                    service, _, operation = key.partition(".")
                    self.requests[(service, operation)] += n
                    self.by_function[(fn, service, operation)] += n
            self.entities_read += entities_read

    def count(self, service: str, operation: str) -> int:
        with self._lock:
            return self.requests[(service, operation)]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"requests": {f"{s}.{o}": n for (s, o), n in sorted(self.requests.items())},
                    "entities_read": self.entities_read}

    def per_function(self) -> dict[str, dict[str, int]]:
        with self._lock:
            out: dict[str, dict[str, int]] = {}
            for (fn, svc, op), n in sorted(self.by_function.items()):
                out.setdefault(fn, {})[f"{svc}.{op}"] = n
            return out

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.by_function.clear()
            self.entities_read = 0


# The simulated remote services' own storage: the services' bill, not the app's.
NOT_THE_APPS = frozenset({"simulated_service", "simulated_provider"})
READS = ("table.read", "table.query")


def is_table_write(operation: str) -> bool:
    return operation.startswith("table.") and operation not in READS


def per_order_counts(orders: int, per_function: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The app's storage requests per order, from StorageMeter.per_function(): what the
    benchmark reports and the demo prints, counted one way."""
    n = max(orders, 1)
    totals: Counter[str] = Counter()
    for fn, ops in per_function.items():
        if fn not in NOT_THE_APPS:
            totals.update(ops)
    sched: Counter[str] = Counter(per_function.get("scheduler_commands", {}))
    sched.update(per_function.get("scheduler_replies", {}))
    sup = per_function.get("supervisor", {})
    writes = [k for k in totals if is_table_write(k)]
    return {
        "orders": orders,
        "table_writes": sum(totals[k] for k in writes) / n,
        "table_reads": sum(totals[k] for k in READS) / n,
        "scheduler_table_reads": sum(sched[k] for k in READS) / n,
        "supervisor_table_reads": sum(sup.get(k, 0) for k in READS) / n,
        # Each Agent reads the order before calling its service (shared/domain/provenance.py).
        "agent_table_reads": sum(ops.get(k, 0) for fn, ops in per_function.items()
                                 if fn.endswith("_agent") for k in READS) / n,
        # Its tick log is written once per tick whatever the orders: time, not orders, drive it.
        "supervisor_table_writes": sum(v for k, v in sup.items()
                                       if is_table_write(k)) / n,
        "queue_sends": totals["queue.send"] / n,
        "queue_receives": totals["queue.receive"] / n,
        "queue_empty_polls": totals["queue.receive.empty"] / n,
        "queue_deletes": totals["queue.delete"] / n,
        "queue_updates": totals["queue.update"] / n,
        "transactions": sum(v for k, v in totals.items()
                            if k.startswith(("table.", "queue."))) / n,
        "table_transactions": sum(v for k, v in totals.items() if k.startswith("table.")) / n,
        "queue_transactions": sum(v for k, v in totals.items() if k.startswith("queue.")) / n,
        "write_breakdown": {k: totals[k] / n for k in sorted(writes)},
        # What the Service Bus stand-in asked of Azurite (receive, receive.empty, delete...).
        SERVICE_BUS_STAND_IN: {k.partition(".")[2]: v / n for k, v in sorted(totals.items())
                               if k.startswith(SERVICE_BUS_STAND_IN + ".")},
    }


class MeteredHost(Protocol):
    """What the meter asks of the local host (localrun/host/host.py's LocalFunctionHost)."""

    @property
    def idle(self) -> bool: ...


def all_metered(states: Iterable[Mapping[str, Any]], inflight: TableClient,
                host: MeteredHost) -> bool:
    """Whether the meter has counted all the work of these settled orders (state records as
    read from the table, ``IndexKey`` among their columns).

    A record shows its order settled before the outbox of that write has run: the status
    message and, last of all, the removal of the index entry the record names (state.py,
    ``_finish``). Once none of those entries is left, and after that the host is idle, the
    invocation that removed the last one has returned, and the response hook has counted
    each of its requests."""
    named = {s["IndexKey"] for s in states if s.get("IndexKey")}
    left = any(str(IndexKey(e["PartitionKey"], e["RowKey"])) in named
               for e in inflight.list_entities(select=["PartitionKey", "RowKey"]))
    return not left and host.idle


def wait_metered(states: Sequence[Mapping[str, Any]], inflight: TableClient,
                 host: MeteredHost, deadline: float) -> bool:
    """Wait until all_metered, or the ``time.monotonic()`` deadline: whether it came."""
    while not all_metered(states, inflight, host):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# The local host's own records, and the simulated remote services' (not the app's bill).
NOT_THE_APPS_LOGS = ("localrun", "shared.handlers.simulated_service",
                     "shared.handlers.simulated_provider")


class LogCounter(logging.Handler):
    """Counts the records the Python worker would forward to the host (and Azure would bill).

    The worker sets the root logger to INFO and forwards every record at that level or above; the
    local host's own records (``localrun``) are not the app's and are left out.
    """

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.records = 0
        self.bytes = 0
        self.by_logger: dict[str, int] = {}
        self._lock_ = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(NOT_THE_APPS_LOGS):
            return
        size = len(record.getMessage().encode())
        with self._lock_:
            self.records += 1
            self.bytes += size
            self.by_logger[record.name] = self.by_logger.get(record.name, 0) + 1

    def reset(self) -> None:
        with self._lock_:
            self.records = self.bytes = 0
            self.by_logger = {}

    def absorb(self, records: int, size: int, by_logger: Mapping[str, int]) -> None:
        """Add what another process counted (a worker process's, host/worker.py)."""
        with self._lock_:
            self.records += records
            self.bytes += size
            for name, n in by_logger.items():
                self.by_logger[name] = self.by_logger.get(name, 0) + n

    def __enter__(self) -> LogCounter:
        root = logging.getLogger()
        self._level = root.level
        # Other handlers keep their own levels: the console stays as quiet as it was.
        for h in root.handlers:
            if h.level == logging.NOTSET:
                h.setLevel(self._level)
        root.setLevel(logging.INFO)
        root.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        root = logging.getLogger()
        root.removeHandler(self)
        root.setLevel(self._level)
