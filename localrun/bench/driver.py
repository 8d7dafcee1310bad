"""The bench's load driver: orders sent through the local host on fresh tables and queues,
until all settle, with every storage request, log record and CPU second of the run counted."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localrun.appsettings import isolated_names, local_app_settings
from localrun.bench.cpu import OTHER, CpuUse
from localrun.host.config import QueueOptions
from localrun.metering import (
    NOT_THE_APPS,
    READS,
    LogCounter,
    is_table_write,
    per_order_counts,
    wait_metered,
)
from shared.domain.state import CompensationState, ProcessState, settled

ROOT = Path(__file__).resolve().parents[2]

# The most messages one receive of the host asks for: host.json's batchSize.
BATCH = QueueOptions.from_host_json(json.loads((ROOT / "host.json").read_text())).batch_size
# Supervisor ticks timed per case, of which the bench reports the middle one.
TICKS = 3
STEADY_RATE = 5.0  # orders per second: well below the ceiling, so latency is not queueing
# 7 writes before the outbox, + 3: each outbox that dispatches a step is confirmed sent.
TARGETS = {"table_writes": 10, "scheduler_table_reads": 4, "queue_sends": 7,
           "throughput_ratio": 0.8, "tick_time_ratio": 1.2, "steady_p50_s": 0.3,
           # per tick, beyond two per overdue order (its entry and its record): 110 for 50
           "entities_beyond_overdue": 10}


@dataclass
class Scale:
    transactions_orders: int = 100
    throughput_orders: int = 500
    completed_orders: int = 10_000
    expired_steps: int = 50
    idle_in_flight: int = 10_000
    recovery_orders: int = 200
    latency_orders: int = 100
    ceiling_ops: int = 2000
    starvation_orders: int = 100
    starvation_window_s: float = 8.0
    limit_orders: int = 200

    @classmethod
    def smoke(cls) -> Scale:
        return cls(transactions_orders=8, throughput_orders=20, completed_orders=200,
                   expired_steps=10, idle_in_flight=200, recovery_orders=20, latency_orders=10,
                   ceiling_ops=200,
                   starvation_orders=20, starvation_window_s=3.0, limit_orders=20)


@contextlib.contextmanager
def own_azurite(name: str) -> Iterator[Any]:
    """An Azurite of a run's own (its data in .azurite/NAME, gone after), with the app's
    settings that function_app reads at import pointed at it, as the on-demand runs (make
    pause-run, limit-run, redrive-run) start: the Azurite, its connection string and pid."""
    import logging

    from localrun.azurite import Azurite

    logging.basicConfig(level=logging.ERROR, force=True)
    data = ROOT / ".azurite" / name
    shutil.rmtree(data, ignore_errors=True)
    az = Azurite.start(location=data)
    os.environ.setdefault("AzureWebJobsStorage", az.connection_string)
    os.environ.setdefault("SimulatorsEnabled", "true")
    os.environ.setdefault("RemoteServiceKey", json.loads(
        (ROOT / "local.settings.template.json").read_text())["Values"]["RemoteServiceKey"])
    sys.path.insert(0, str(ROOT))
    try:
        yield az
    finally:
        az.stop()
        shutil.rmtree(data, ignore_errors=True)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def _envelope_bytes(spans: list[Any]) -> int:
    """The size of the Application Insights items these spans and their events become, by the
    exporter's own conversion (without an exporter: one would start threads of its own here)."""
    from azure.monitor.opentelemetry.exporter.export.trace._exporter import (
        _convert_span_events_to_envelopes,
        _convert_span_to_envelope,
    )

    items = [item for s in spans
             for item in (_convert_span_to_envelope(s), *_convert_span_events_to_envelopes(s))]
    return sum(len(json.dumps(item.as_dict(), default=str)) for item in items)


WATCHED = ["OrderID", "ProcessState", "Compensation", "FailureCount", "UpdatedAt", "IndexKey"]


def _settled(s: dict[str, Any]) -> bool:
    return settled(ProcessState(s["ProcessState"]),
                   CompensationState(s["Compensation"]) if s.get("Compensation") else None)


@dataclass
class Run:
    orders: int
    elapsed: float
    states: Sequence[dict[str, Any]]
    sent_at: dict[str, float]
    usage: dict[str, Any]
    per_function: dict[str, dict[str, int]]
    completions: list[float] = field(default_factory=list)
    logs: LogCounter | None = None
    invocations: dict[str, int] = field(default_factory=dict)
    # CPU per process from the host's start until the watcher saw all settled (Bench.cpu_use).
    cpu: CpuUse = field(default_factory=CpuUse)
    # CPU seconds of each function's invocations (the invoking thread's), by function.
    function_cpu: dict[str, float] = field(default_factory=dict)

    def latencies(self, faulted: bool | None = None) -> list[float]:
        out = []
        for s in self.states:
            if s["ProcessState"] != "Processed":
                continue
            if faulted is not None and (int(s.get("FailureCount", 0)) > 0) != faulted:
                continue
            out.append(s["UpdatedAt"].timestamp() - self.sent_at[s["OrderID"]])
        return out


class BenchBase:
    """Runs orders through the local host on fresh tables and queues, and counts."""

    def __init__(self, connection: str, scale: Scale, azurite_pid: int | None = None) -> None:
        self.connection = connection
        self.scale = scale
        self.azurite_pid = azurite_pid
        from localrun.azurite import free_port

        self.port = free_port()

    def cpu_use(self, worker_pid: int | None = None) -> CpuUse:
        """The CPU of this process (the local host, the harness and, without a worker process,
        the app), of the worker process if there is one, and of Azurite."""
        processes: dict[str, int | None] = {"bench_process": None}
        if self.azurite_pid is not None:
            processes["azurite"] = self.azurite_pid
        if worker_pid is not None:
            processes["worker_process"] = worker_pid
        return CpuUse(thread_role, **processes)

    def base_env(self, tag: str, **overrides: str) -> dict[str, str]:
        defaults = {"SimTransientErrorRate": "0", "SimPermanentErrorRate": "0",
                    "SimHangRate": "0", "SimLatencyMs": "0",
                    "SupervisorSchedule": "*/5 * * * * *", "PendingGraceSeconds": "30",
                    "StepBudgetSeconds": "", "AgentRetryBaseSeconds": "0.05",
                    "AgentRetryMaxSeconds": "0.5"}
        return local_app_settings(
            self.connection, self.port, **isolated_names(f"{tag}{uuid.uuid4().hex[:6]}"),
            **{**defaults, **overrides})

    def run_orders(self, tag: str, n: int, workflow: Any = None, timeout: float = 900,
                   rate: float | None = None, worker_process: bool = False,
                   during: Callable[[Any], None] | None = None, **overrides: str) -> Run:
        """Send n orders (all at once, or at `rate` per second) and wait until all settle.
        With `worker_process`, the functions run in a process of their own, as in Azure
        (localrun/host/worker.py; the app's own workflow only). ``during``: what an operator
        does meanwhile, handed the app's container, in a thread of its own from the host's
        start (the run waits for it as for the orders)."""
        from azure.data.tables import TableServiceClient
        from azure.storage.queue import QueueServiceClient

        import function_app
        from localrun.host.host import LocalFunctionHost
        from localrun.host.worker import WorkerProcess
        from localrun.metering import StorageMeter
        from orderctl.samples import sample_orders
        from orderctl.senders import LocalSender
        from shared import bootstrap
        from shared.domain.workflow import Registry
        from shared.settings import load_settings
        from shared.workflows import REGISTRY

        env = self.base_env(tag, **overrides)
        meter = StorageMeter()
        settings = load_settings(env)
        c = bootstrap.build(settings, table_options=meter.table_options,
                            queue_options=meter.queue_options,
                            workflows=Registry.of([workflow or REGISTRY.get()]))
        bootstrap.reset(c)
        c.ensure_resources()
        tables = TableServiceClient.from_connection_string(self.connection)
        watcher = tables.get_table_client(settings.state_table)
        inflight = tables.get_table_client(settings.inflight_table)
        sender = LocalSender(QueueServiceClient.from_connection_string(self.connection),
                             settings.orders_queue)
        if worker_process and workflow is not None:
            raise ValueError("a worker process runs the app's own workflow")
        worker = (WorkerProcess("function_app:app", settings=env,
                                storage_connection=self.connection,
                                host_json=ROOT / "host.json", metered=True).start()
                  if worker_process else None)
        host = LocalFunctionHost(function_app.app, settings=env,
                                 storage_connection=self.connection,
                                 host_json=ROOT / "host.json", http_port=self.port,
                                 poll_interval=0.2, queue_options=meter.queue_options,
                                 worker=worker)
        logs = LogCounter().__enter__()
        try:
            orders = list(sample_orders(n))
            meter.reset()
            if worker is not None:
                worker.reset_counts()
            sent_at: dict[str, float] = {}
            cpu = self.cpu_use(worker.pid if worker is not None else None)
            operator = threading.Thread(target=during or (lambda _: None), args=(c,),
                                        name="bench-operator", daemon=True)
            if rate:
                cpu.start()
                host.start()
                operator.start()
            started = time.time()
            for i, o in enumerate(orders):
                if rate:
                    time.sleep(max(0.0, started + i / rate - time.time()))
                sent_at[o["order_id"]] = time.time()
                sender.send([(o["order_id"], json.dumps(o).encode())])
            if not rate:
                # All at once: a backlog, then the host. The sender's CPU is not the app's (in
                # Azure it is elsewhere), and here it would share this process with the app.
                started = time.time()
                cpu.start()
                host.start()
                operator.start()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                # Every 2 s, only what tells settled from not: the watcher shares the CPU and
                # Azurite with the app. The times are the records' own, read once at the end.
                if sum(_settled(s) for s in watcher.query_entities(
                        "RowKey eq 'state'", select=WATCHED[:3])) == n:
                    break
                time.sleep(2.0)
            operator.join(max(0.0, deadline - time.monotonic()))
            cpu.stop()
            states = list(watcher.query_entities("RowKey eq 'state'", select=WATCHED))
            done_at = {s["OrderID"]: s["UpdatedAt"].timestamp() for s in states if _settled(s)}
            elapsed = max(done_at.values(), default=time.time()) - started
            if len(done_at) < n:
                raise RuntimeError(f"{tag}: only {len(done_at)}/{n} orders settled")
            # The counts, once the app has finished with these orders, not as the last one
            # shows settled: its outbox is still being carried out then.
            if not wait_metered(states, inflight, host, deadline):
                raise RuntimeError(f"{tag}: the app was still at work on settled orders")
            if worker is not None:
                # The functions' requests and log records were the worker's to count.
                counted = worker.counts()
                meter.absorb(counted.per_function, counted.entities_read)
                logs.absorb(counted.log_records, counted.log_bytes,
                            counted.log_records_by_logger)
            return Run(n, elapsed, states, sent_at, meter.snapshot(), meter.per_function(),
                       sorted(t - started for t in done_at.values()), logs,
                       dict(host.stats.invocations), cpu, dict(host.stats.cpu_seconds))
        finally:
            logs.__exit__()
            host.stop()
            bootstrap.reset()

    # -- scenarios ---------------------------------------------------------------------------


def _order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "customer_id": "bench",
            "items": [{"sku": "SKU-TEA", "quantity": 1, "unit_price": "4.50"}]}


def per_order(run: Run) -> dict[str, Any]:
    return {
        **per_order_counts(run.orders, run.per_function),
        "failed_orders": sum(s["ProcessState"] == "Error" for s in run.states),
        **log_volume(run),
    }


def simulators_per_order(run: Run) -> dict[str, float]:
    """The simulated services' own storage requests per order: not the app's bill, but the
    same Azurite serves them in the run."""
    ops = {k: v / max(run.orders, 1) for fn, counts in run.per_function.items()
           if fn in NOT_THE_APPS for k, v in counts.items()}
    return {"table_reads": sum(v for k, v in ops.items() if k in READS),
            "table_writes": sum(v for k, v in ops.items() if is_table_write(k))}


# The host writes two records of its own per invocation (Executing, Executed) at Information.
HOST_RECORDS_PER_INVOCATION = 2


def log_volume(run: Run) -> dict[str, Any]:
    if run.logs is None:
        return {}
    n = run.orders
    invocations = sum(v for k, v in run.invocations.items() if k not in NOT_THE_APPS)
    return {"log_records": run.logs.records / n, "log_bytes": run.logs.bytes / n,
            "log_records_by_logger": {k: v / n for k, v in sorted(run.logs.by_logger.items())},
            "invocations": invocations / n,
            "host_log_records": HOST_RECORDS_PER_INVOCATION * invocations / n}


# The local host names its threads: "worker_N" run the functions (the worker's shared pool; the
# simulated services' too), "listener_N" and "host-…" do the host's side of each message
# (receive, renew, settle), the HTTP server's threads parse requests, the main thread is the
# harness. In Azure only the first are in the worker's process.
_ROLES = (("worker", "functions"), ("listener", "host"), ("host-", "host"),
          ("MainThread", "harness"))


def thread_role(name: str) -> str:
    if name.endswith("(process_request_thread)"):
        return "http_server"
    return next((role for prefix, role in _ROLES if name.startswith(prefix)), OTHER)


# How the report names each role.
ROLE_NAMES = {"functions": "the functions' threads", "host": "the host's listeners",
              "http_server": "its HTTP server", "harness": "the harness",
              OTHER: "other threads"}


