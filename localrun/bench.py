"""`make bench`: what an order costs in storage transactions, and how fast the pipeline goes.

Starts its own Azurite, runs each scenario through the local host on fresh tables and queues,
and writes bench-report/report.{json,md} and chart.png. Every figure is counted or timed in
this run: requests by a metering hook on the app's storage clients (attributed to the function
that made them), times by the clock.

Scenarios: transactions per order (1-step and 3-step workflow, without and with 20% transient
faults); throughput and latency (500 orders) against the ceiling of the same Azurite (the rate
it serves each kind of request the run makes, before and after the run); one Supervisor tick
with 50 expired steps, before and after 10,000 completed orders are added; recovery when Agents
go silent for 10% of requests; a backlog while every remote call hangs (does the rest of the
app still run?); log records per order, as the worker would forward them; peak memory.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import platform
import re
import resource
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from localrun.appsettings import isolated_names, local_app_settings
from localrun.cpu import OTHER, CpuUse
from localrun.host import QueueOptions
from localrun.metering import (
    NOT_THE_APPS,
    READS,
    SERVICE_BUS_STAND_IN,
    is_table_write,
    per_order_counts,
    wait_metered,
)
from shared.domain.state import CompensationState, ProcessState, settled

ROOT = Path(__file__).resolve().parent.parent

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

    @classmethod
    def smoke(cls) -> Scale:
        return cls(transactions_orders=8, throughput_orders=20, completed_orders=200,
                   expired_steps=10, idle_in_flight=200, recovery_orders=20, latency_orders=10,
                   ceiling_ops=200,
                   starvation_orders=20, starvation_window_s=3.0)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


# The local host's own records, and the simulated remote services' (not the app's bill).
NOT_THE_APPS_LOGS = ("localrun", "shared.handlers.simulated_service")


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
        """Add what another process counted (a worker process's, worker.py)."""
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
    states: list[dict[str, Any]]
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


class Bench:
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
                   **overrides: str) -> Run:
        """Send n orders (all at once, or at `rate` per second) and wait until all settle.
        With `worker_process`, the functions run in a process of their own, as in Azure
        (worker.py; the app's own workflow only)."""
        from azure.data.tables import TableServiceClient
        from azure.storage.queue import QueueServiceClient

        import function_app
        from localrun.host import LocalFunctionHost
        from localrun.metering import StorageMeter
        from localrun.worker import WorkerProcess
        from orderctl.samples import sample_orders
        from orderctl.senders import LocalSender
        from shared import bootstrap
        from shared.domain.workflow import Registry
        from shared.settings import load_settings
        from shared.workflows.orders import ORDER_FULFILMENT

        env = self.base_env(tag, **overrides)
        meter = StorageMeter()
        settings = load_settings(env)
        c = bootstrap.build(settings, table_options=meter.table_options,
                            queue_options=meter.queue_options,
                            workflows=Registry.of([workflow or ORDER_FULFILMENT]))
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
            if rate:
                cpu.start()
                host.start()
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
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                # Every 2 s, only what tells settled from not: the watcher shares the CPU and
                # Azurite with the app. The times are the records' own, read once at the end.
                if sum(_settled(s) for s in watcher.query_entities(
                        "RowKey eq 'state'", select=WATCHED[:3])) == n:
                    break
                time.sleep(2.0)
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

    def transactions(self) -> list[dict[str, Any]]:
        from shared.domain.workflow import Step, Workflow
        from shared.workflows.orders.message import Order

        one_step = Workflow("one-step", (Step("charge_payment", "payment", "charge", "refund",
                                              timedelta(seconds=30)),), message=Order)
        rows = []
        for label, wf, faults in [("3-step", None, "0"), ("3-step", None, "0.2"),
                                  ("1-step", one_step, "0"), ("1-step", one_step, "0.2")]:
            run = self.run_orders("tx", self.scale.transactions_orders, wf,
                                  SimTransientErrorRate=faults, CircuitBreakerFailures="50")
            rows.append({"workflow": label, "transient_fault_rate": float(faults),
                         **per_order(run)})
        return rows

    def latency_breakdown(self) -> dict[str, Any]:
        """Where send -> Processed goes at a steady 5 orders/s, hop by hop, from each order's
        spans: a queue wait is the gap between the span that sent a message and the span that
        took it (polling included); a function's time is its span; a remote call's, its span."""
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from shared import tracing

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))  # as a real exporter batches
        tracing.use_provider(provider)
        try:
            run = self.run_orders("hops", self.scale.latency_orders, rate=STEADY_RATE)
            provider.force_flush()
        finally:
            tracing.use_provider(None)
            provider.shutdown()
        return hop_medians(run, list(exporter.get_finished_spans()))

    def tracing(self) -> dict[str, Any]:
        """What one trace per order costs: fault-free 3-step orders with tracing off, then on
        (an SDK provider batching to an in-memory exporter, as a real exporter would batch)."""
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from shared import tracing

        n = self.scale.transactions_orders
        off = self.run_orders("troff", n)
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        tracing.use_provider(provider)
        try:
            on = self.run_orders("tron", n)
            provider.force_flush()
        finally:
            tracing.use_provider(None)
            provider.shutdown()
        finished = exporter.get_finished_spans()
        # The Supervisor's ticks are driven by time, not orders: counted apart.
        spans = [s for s in finished if s.name != "supervisor tick"]
        by_name: dict[str, int] = {}
        for s in spans:
            key = s.name.split(" ")[0] if s.name.startswith("service ") else s.name
            by_name[key] = by_name.get(key, 0) + 1
        # Not the app's: the simulated services' spans (a real service traces itself) and the
        # sender's (the bench sends as `orders send` does).
        services = by_name.get("service", 0) + by_name.get("orders send", 0)
        events = sum(len(s.events) for s in spans)
        return {
            "orders": n,
            # What the Azure Monitor exporter would send for the app's spans, as JSON (it
            # gzips on the wire; ingestion is billed on the data as stored, of about this size).
            "telemetry_bytes_per_order": _envelope_bytes(
                [s for s in spans if not s.name.startswith(("service ", "orders send"))]) / n,
            # Each span is one Application Insights item (request or dependency), and each span
            # event one more (a trace item), with the Azure Monitor exporter.
            "spans_per_order": (len(spans) - services) / n,
            "span_events_per_order": events / n,
            "telemetry_items_per_order": (len(spans) - services + events) / n,
            "sender_and_service_spans_per_order": services / n,
            "spans_by_name_per_order": {k: v / n for k, v in sorted(by_name.items())},
            "supervisor_tick_spans": len(finished) - len(spans),
            "seconds_per_order": {"off": off.elapsed / n, "on": on.elapsed / n},
            "overhead": on.elapsed / off.elapsed - 1 if off.elapsed else None,
        }

    def ceiling_clients(self) -> tuple[Any, Any]:
        """Table and queue service clients set up as the app's are (its transport, a meter's
        hook): the ceiling then differs from the app only in what it asks, not in how. With
        the SDK's default transport, each request also looked for ~/.netrc and scanned the
        environment for proxies, which the app does not, and the ceiling came out 2-16% lower."""
        from azure.data.tables import TableServiceClient
        from azure.storage.queue import QueueServiceClient

        from localrun.metering import StorageMeter
        from shared.adapters.storage import pooled_transport

        meter = StorageMeter()
        return (TableServiceClient.from_connection_string(
                    self.connection, transport=pooled_transport(), **meter.table_options),
                QueueServiceClient.from_connection_string(
                    self.connection, transport=pooled_transport(), **meter.queue_options))

    def ceiling(self, sync: Callable[[], object] = lambda: None) -> dict[str, float]:
        """Each kind of request at 8 threads. ``sync`` is called before each timed phase (a
        barrier, when several processes measure together: ceiling_in)."""
        from azure.core import MatchConditions
        from azure.data.tables import UpdateMode

        n = self.scale.ceiling_ops
        tables, queues = self.ceiling_clients()
        table = tables.create_table(f"Ceiling{uuid.uuid4().hex[:8]}")
        etags = {}
        for i in range(n):
            etags[i] = table.create_entity({"PartitionKey": f"p{i}", "RowKey": "r", "N": 0})[
                "etag"]

        def write(i: int) -> None:
            table.update_entity({"PartitionKey": f"p{i}", "RowKey": "r", "N": 1},
                                mode=UpdateMode.REPLACE, etag=etags[i],
                                match_condition=MatchConditions.IfNotModified)

        sync()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(write, range(n)))
        writes_per_s = n / (time.perf_counter() - t0)

        def read(i: int) -> None:
            table.get_entity(f"p{i}", "r")

        sync()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(read, range(n)))
        reads_per_s = n / (time.perf_counter() - t0)
        transactions = max(50, n // 4)

        def transaction(i: int) -> None:
            # As intake's: two new entities in one entity-group transaction.
            table.submit_transaction([("create", {"PartitionKey": f"t{i}", "RowKey": row})
                                      for row in ("a", "b")])

        sync()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(transaction, range(transactions)))
        transactions_per_s = transactions / (time.perf_counter() - t0)
        queue = queues.create_queue(f"ceiling-{uuid.uuid4().hex[:8]}")
        cycles = max(50, n // 4)

        def cycle(_: int) -> None:
            queue.send_message("x")
            for m in queue.receive_messages(max_messages=1):
                queue.delete_message(m)

        sync()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(cycle, range(cycles)))
        cycles_per_s = cycles / (time.perf_counter() - t0)

        def poll(_: int) -> None:
            list(queue.receive_messages(max_messages=32))

        sync()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(poll, range(cycles)))
        polls_per_s = cycles / (time.perf_counter() - t0)
        return {"conditional_writes_per_s": writes_per_s, "point_reads_per_s": reads_per_s,
                "transactions_per_s": transactions_per_s,
                "queue_cycles_per_s": cycles_per_s, "empty_polls_per_s": polls_per_s,
                **self._message_requests(queues, cycles, sync)}

    def ceiling_in(self, processes: int) -> dict[str, float]:
        """The ceiling with ``processes`` client processes asking at once, each phase begun by
        all together (a barrier): for each kind, what they served together, which is the number
        of processes times the slowest one's rate (each makes the same requests). On two cores
        one client process cannot keep Azurite busy; the app, with its worker in a process of
        its own, is two."""
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(processes)
        results = ctx.Queue()
        others = [ctx.Process(target=_ceiling_client, daemon=True,
                              args=(self.connection, self.scale, barrier, results))
                  for _ in range(processes - 1)]
        for p in others:
            p.start()
        try:
            rates = [self.ceiling(sync=lambda: barrier.wait(timeout=300))]
            rates += [results.get(timeout=300) for _ in others]
        finally:
            for p in others:
                p.join(timeout=30)
        return {kind: processes * min(r[kind] for r in rates) for kind in rates[0]}

    @staticmethod
    def _message_requests(service: Any, cycles: int,
                          sync: Callable[[], object] = lambda: None) -> dict[str, float]:
        """Each kind of message request, as the host makes them, on a shallow queue (Azurite's
        receive slows as a queue grows): cycles of one send, one receive, one delete, then of
        a batch (BATCH sends, one receive of BATCH, BATCH deletes), 8 threads each, each thread on a
        queue of its own. A cycle's time is shared among its kinds in proportion to how long
        each request took."""
        tag = uuid.uuid4().hex[:8]
        queues = [service.create_queue(f"ceiling-{tag}-{i}") for i in range(8)]

        def cycles_of(k: int, n: int) -> dict[str, float]:
            spent = {"send": 0.0, "receive": 0.0, "delete": 0.0}
            lock = threading.Lock()
            mine, taken = threading.local(), iter(queues)

            def cycle(_: int) -> None:
                if not hasattr(mine, "queue"):
                    with lock:
                        mine.queue = next(taken)
                queue = mine.queue
                took = {}
                t = time.perf_counter()
                for _ in range(k):
                    queue.send_message("x")
                took["send"], t = time.perf_counter() - t, time.perf_counter()
                got = list(next(queue.receive_messages(messages_per_page=k,
                                                       visibility_timeout=600).by_page(), []))
                if len(got) != k:
                    raise RuntimeError(f"ceiling: a receive of {k} got {len(got)}")
                took["receive"], t = time.perf_counter() - t, time.perf_counter()
                for m in got:
                    queue.delete_message(m)
                took["delete"] = time.perf_counter() - t
                with lock:
                    for kind, seconds in took.items():
                        spent[kind] += seconds

            sync()
            t0 = time.perf_counter()
            with ThreadPoolExecutor(8) as ex:
                list(ex.map(cycle, range(n)))
            wall = time.perf_counter() - t0
            total = sum(spent.values())
            return {kind: wall * seconds / total for kind, seconds in spent.items()}

        batches = max(10, cycles // BATCH)
        single, batch = cycles_of(1, cycles), cycles_of(BATCH, batches)
        return {"queue_sends_per_s": cycles / single["send"],
                "queue_receives_1_per_s": cycles / single["receive"],
                f"queue_receives_{BATCH}_per_s": batches / batch["receive"],
                "queue_deletes_per_s": cycles / single["delete"]}

    def throughput(self, ceiling: dict[str, float], ceiling_cores: dict[str, float],
                   ceiling_two: dict[str, float]) -> tuple[dict[str, Any], Run]:
        """The burst against the bound that `ceiling` (one client process, measured with
        `ceiling_cores` busy) and `ceiling_two` (two at once) imply: each kind of request at
        the better of their rates."""
        # The functions in a worker process of their own, as in Azure: the host's side of each
        # message does not take the functions' GIL (worker.py).
        run = self.run_orders("tp", self.scale.throughput_orders, worker_process=True)
        # This machine's speed drifts by minutes: the ceiling is measured again right after the
        # run, and the bound takes each rate's mean of the two.
        with self.cpu_use() as after_cpu:
            after = self.ceiling()
        after_two = self.ceiling_in(2)
        mean_one = {k: (v + after[k]) / 2 for k, v in ceiling.items()}
        # The app is two processes (host and worker): one client process is not the most this
        # Azurite serves, and the bound takes, kind by kind, the better of one and two.
        mean = best_rates(mean_one, {k: (v + after_two[k]) / 2 for k, v in ceiling_two.items()})
        costs = per_order(run)
        writes, messages = costs["table_writes"], costs["queue_sends"] + 1  # + Service Bus
        # The first bound: writes and send+receive+delete cycles only.
        bound = 1 / (writes / mean["conditional_writes_per_s"]
                     + messages / mean["queue_cycles_per_s"])
        simulators = simulators_per_order(run)
        every = every_request_seconds(costs, simulators, mean)
        every_request = sum(every.values())
        one_process = sum(every_request_seconds(costs, simulators, mean_one).values())
        achieved = run.orders / run.elapsed
        # How far the machine's drift moves the ratio: the same bound from each side's ceilings
        # alone. A wide range says the machine's drift, not the app, moved the figure.
        sides = {side: achieved * sum(every_request_seconds(
                     costs, simulators, best_rates(one, two)).values())
                 for side, one, two in (("before", ceiling, ceiling_two),
                                        ("after", after, after_two))}
        lat = run.latencies()
        steady = self.run_orders("lat", self.scale.latency_orders, rate=STEADY_RATE,
                                 worker_process=True)
        slat = steady.latencies()
        return {
            "orders": run.orders, "elapsed_s": run.elapsed, "orders_per_s": achieved,
            "bound_orders_per_s": bound, "ratio_to_bound": achieved / bound,
            "bound_every_request_orders_per_s": 1 / every_request,
            "every_request_seconds_per_order": every, "ceiling_after": after,
            "ceiling_two_processes": ceiling_two, "ceiling_after_two_processes": after_two,
            # Against one client process's ceiling alone, as until 2026-11-23.
            "bound_one_process_orders_per_s": 1 / one_process,
            "ratio_to_one_process_bound": achieved * one_process,
            "ratio_to_every_request_bound": achieved * every_request,
            "ratio_to_every_request_bound_by_side": sides,
            # Which of the processes was the limit: Azurite, or this one's Python (one GIL).
            "worker_process": True,
            "cpu_cores": {"ceiling_before": ceiling_cores, "run": run.cpu.cores,
                          "ceiling_after": after_cpu.cores},
            "cpu_ms_per_order": {name: 1000 * seconds / run.orders
                                 for name, seconds in run.cpu.seconds.items()},
            # The bench's process (the host's side), by whose work its threads did (thread_role).
            "cpu_ms_per_order_by_role": {role: 1000 * seconds / run.orders
                                         for role, seconds in sorted(run.cpu.by_role.items())},
            # ... and the functions' share, by function (the simulated services' included).
            "cpu_ms_per_order_by_function": {
                name: 1000 * seconds / run.orders
                for name, seconds in sorted(run.function_cpu.items(), key=lambda kv: -kv[1])},
            "latency_s": {"p50": percentile(lat, 50), "p95": percentile(lat, 95),
                          "p99": percentile(lat, 99)},
            "steady_rate": STEADY_RATE, "steady_orders": steady.orders,
            "steady_latency_s": {"p50": percentile(slat, 50), "p95": percentile(slat, 95),
                                 "p99": percentile(slat, 99)},
        }, run

    def supervisor(self) -> dict[str, Any]:
        from localrun.metering import StorageMeter
        from shared import bootstrap
        from shared.adapters.state_store import state_to_entity
        from shared.domain.state import ProcessState, claim, receive
        from shared.settings import load_settings
        from shared.workflows.orders.message import parse_order

        # The clock jumps hours between ticks here: that is not an outage.
        # ... and the same orders are rescued tick after tick: none may run out of rescues.
        env = self.base_env("sup", FailureThreshold="100", OutageGapSeconds="86400",
                            RescueThreshold="100")
        meter = StorageMeter()
        clock_now = [datetime.now(UTC)]
        c = bootstrap.build(load_settings(env), clock=lambda: clock_now[0],
                            table_options=meter.table_options, queue_options=meter.queue_options)
        c.ensure_resources()
        store = c.store
        c.supervisor.tick()  # the Supervisor was running before these orders
        past = clock_now[0] - timedelta(hours=1)
        for i in range(self.scale.expired_steps):
            o = parse_order(json.dumps(_order(f"late-{i:04d}")))
            s = store.create(o, receive(o.order_id, c.workflow, past))
            claimed = claim(s, "bench", past, c.workflow).state
            claimed.outbox = []  # its request was sent (and lost): a timeout that counts
            store.save(claimed)

        state_table = c.tables.get_table_client(c.settings.state_table)
        # A control: as many entities in the same table, each under a row key of its own.
        # Azurite finds an entity through its row-key index first and then scans what shares
        # that row key (LokiJS applies the two keys one after the other), and every state
        # record's row key is "state": a point read of one scans them all. These do not slow.
        late = [(f"late-{i:04d}", "state") for i in range(self.scale.expired_steps)]
        control = [(f"control-{i:04d}", f"control-{i:04d}")
                   for i in range(self.scale.expired_steps)]
        for pk, rk in control:
            state_table.create_entity({"PartitionKey": pk, "RowKey": rk})

        def point_reads(keys: list[tuple[str, str]]) -> float:
            t0 = time.perf_counter()
            for pk, rk in keys:
                state_table.get_entity(pk, rk)
            return time.perf_counter() - t0

        def due_queries() -> float:
            # The tick's 17 range queries again (nothing is due now): Azurite's own time for them.
            t0 = time.perf_counter()
            store.due(clock_now[0], 200)
            return time.perf_counter() - t0

        def tick() -> dict[str, Any]:
            clock_now[0] += timedelta(hours=2)  # every one of them overdue again
            meter.reset()
            t0 = time.perf_counter()
            report = c.supervisor.tick()
            took = time.perf_counter() - t0
            snap = meter.snapshot()
            return {"seconds": took, "entities_read": snap["entities_read"],
                    "requests": snap["requests"],
                    "acted_on": (report.retried + report.rescued + report.redispatched
                                 + report.excused),
                    "azurite_point_reads_s": point_reads(late),
                    "azurite_control_reads_s": point_reads(control),
                    "azurite_due_queries_s": due_queries()}

        def median_tick() -> dict[str, Any]:
            # The machine's speed drifts by the minute: the middle of TICKS like-for-like ticks.
            ticks = sorted((tick() for _ in range(TICKS)), key=lambda t: t["seconds"])
            return ticks[len(ticks) // 2]

        tick()  # warm-up: the first tick resets the claimed steps; later ones rescue them
        before = median_tick()

        def completed(i: int) -> None:
            o = parse_order(json.dumps(_order(f"done-{i:06d}")))
            s = receive(o.order_id, c.workflow, past)
            s.process_state = ProcessState.PROCESSED
            c.tables.get_table_client(c.settings.state_table).submit_transaction([
                ("create", {"PartitionKey": o.order_id, "RowKey": "order",
                            "Document": json.dumps(o.document()), "Fingerprint": o.fingerprint()}),
                ("create", state_to_entity(s)),
            ])

        with ThreadPoolExecutor(8) as ex:
            list(ex.map(completed, range(self.scale.completed_orders)))
        after = median_tick()
        # Orders in flight whose time has not come: accepted (as intake writes them, indexed by
        # the time the Supervisor would step in) a day after the ticks below.
        later = clock_now[0] + timedelta(days=1)

        def waiting(i: int) -> None:
            o = parse_order(json.dumps(_order(f"idle-{i:06d}")))
            store.create(o, receive(o.order_id, c.workflow, later))

        alone = median_tick()  # the expired steps once more, like for like
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(waiting, range(self.scale.idle_in_flight)))
        with_idle = median_tick()
        c.close()
        return {"expired": self.scale.expired_steps, "completed_added": self.scale.completed_orders,
                "before": before, "after": after,
                "time_ratio": after["seconds"] / before["seconds"],
                "entities_ratio": after["entities_read"] / max(1, before["entities_read"]),
                "idle_in_flight": self.scale.idle_in_flight, "alone": alone, "ticks": TICKS,
                "with_idle": with_idle,
                "with_idle_time_ratio": with_idle["seconds"] / alone["seconds"]}

    def starvation(self) -> dict[str, Any]:
        """A backlog while every remote call hangs past its budget: does the rest still run?

        Every Agent holds a worker thread for its whole budget, and so does every simulated
        service answering it (it is an HTTP function of the same app). Meanwhile /health is asked
        every half second and the Supervisor is due every second. Run once with the pool the
        Bicep deploys and once with the worker's own default, min(32, CPUs + 4).
        """
        import requests
        from azure.storage.queue import QueueServiceClient

        import function_app
        from localrun.appsettings import local_app_settings as template
        from localrun.host import LocalFunctionHost
        from orderctl.samples import sample_orders
        from orderctl.senders import LocalSender
        from shared import bootstrap
        from shared.settings import load_settings

        deployed = template(self.connection, self.port)["PYTHON_THREADPOOL_THREAD_COUNT"]
        budget, window = 6, self.scale.starvation_window_s
        out: dict[str, Any] = {"backlog": self.scale.starvation_orders, "step_budget_s": budget,
                               "window_s": window}
        for label, threads in (("deployed", deployed),
                               ("worker_default", str(min(32, (os.cpu_count() or 1) + 4)))):
            env = self.base_env(
                "hang", SimHangRate="1", SimHangSeconds=str(budget + 2),
                StepBudgetSeconds=",".join(f"{s}={budget}" for s in (
                    "reserve_inventory", "charge_payment", "arrange_shipping")),
                SupervisorSchedule="*/1 * * * * *", PYTHON_THREADPOOL_THREAD_COUNT=threads)
            settings = load_settings(env)
            c = bootstrap.build(settings)
            bootstrap.reset(c)
            c.ensure_resources()
            host = LocalFunctionHost(function_app.app, settings=env,
                                     storage_connection=self.connection,
                                     host_json=ROOT / "host.json", http_port=self.port,
                                     poll_interval=0.2).start()
            try:
                sender = LocalSender(QueueServiceClient.from_connection_string(self.connection),
                                     settings.orders_queue)
                for o in sample_orders(self.scale.starvation_orders):
                    sender.send([(o["order_id"], json.dumps(o).encode())])
                time.sleep(2.0)  # intake and the first dispatches: the Agents are now stuck
                ticks_before = host.stats.invocations.get("supervisor", 0)
                health: list[float] = []
                t_end = time.monotonic() + window
                while time.monotonic() < t_end:
                    t0 = time.perf_counter()
                    try:
                        requests.get(f"http://127.0.0.1:{self.port}/api/health", timeout=window,
                                     headers={"x-functions-key": host.keys.function})
                        health.append(time.perf_counter() - t0)
                    except requests.RequestException:
                        health.append(float("inf"))
                    time.sleep(max(0.0, 0.5 - (time.perf_counter() - t0)))
                ticks = host.stats.invocations.get("supervisor", 0) - ticks_before
                agents = sum(v for k, v in host.stats.invocations.items() if k.endswith("_agent"))
            finally:
                host.stop()
                bootstrap.reset()
            out[label] = {"threads": int(threads),
                          "health_s": {"p50": percentile(health, 50),
                                       "max": max(health, default=float("nan")),
                                       "answered": sum(h != float("inf") for h in health),
                                       "asked": len(health)},
                          "supervisor_ticks": ticks, "supervisor_ticks_due": round(window),
                          "agent_invocations_finished": agents}
        return out

    def recovery(self) -> dict[str, Any]:
        budget, interval, backoff = 5, 2, 1
        run = self.run_orders(
            "rc", self.scale.recovery_orders, rate=STEADY_RATE, SimHangRate="0.1",
            SimHangSeconds=str(budget + 3),
            StepBudgetSeconds=",".join(f"{s}={budget}" for s in (
                "reserve_inventory", "charge_payment", "arrange_shipping")),
            SupervisorSchedule=f"*/{interval} * * * * *", RetryBackoffSeconds=str(backoff),
            RetryBackoffMaxSeconds="4", FailureThreshold="5", PendingGraceSeconds="10")
        clean = run.latencies(faulted=False)
        baseline = statistics.median(clean) if clean else 0.0
        per_loss = []
        for s in run.states:
            failures = int(s.get("FailureCount", 0))
            if s["ProcessState"] == "Processed" and failures:
                latency = s["UpdatedAt"].timestamp() - run.sent_at[s["OrderID"]]
                per_loss.append((latency - baseline) / failures)
        return {"orders": run.orders, "orders_with_lost_steps": len(per_loss),
                "silent_rate": 0.1, "budget_s": budget, "supervisor_interval_s": interval,
                "first_backoff_s": backoff, "expected_s": budget + interval + backoff,
                "recovery_per_lost_step_s": {"p50": percentile(per_loss, 50),
                                             "p95": percentile(per_loss, 95)},
                "clean_latency_p50_s": baseline,
                "failed_orders": sum(s["ProcessState"] == "Error" for s in run.states)}


def _ceiling_client(connection: str, scale: Scale, barrier: Any, results: Any) -> None:
    """Another client process of Bench.ceiling_in."""
    results.put(Bench(connection, scale).ceiling(sync=lambda: barrier.wait(timeout=300)))


def best_rates(*ceilings: dict[str, float]) -> dict[str, float]:
    """For each kind of request, the best rate any of these ceilings reached: the bound prices
    every request at what this Azurite was seen to serve."""
    return {kind: max(c[kind] for c in ceilings) for kind in ceilings[0]}


def _order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "customer_id": "bench",
            "items": [{"sku": "SKU-TEA", "quantity": 1, "unit_price": "4.50"}]}


def hop_medians(run: Run, spans: list[Any]) -> dict[str, Any]:
    """Median seconds per hop over the orders that went straight through (no retry)."""
    by_trace: dict[int, list[Any]] = {}
    for s in spans:
        by_trace.setdefault(s.context.trace_id, []).append(s)
    hops: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        hops.setdefault(name, []).append(seconds)

    for trace_spans in by_trace.values():
        # The invocations, in the order they ran (a remote call and the service sit inside
        # their Agent's span).
        chain = sorted((s for s in trace_spans if s.name in (
            "intake", "scheduler start", "scheduler reply") or s.name.startswith("agent ")),
            key=lambda s: s.start_time)
        intake = chain[0] if chain and chain[0].name == "intake" else None
        sent = run.sent_at.get((intake.attributes or {}).get("order.id", "")) if intake else None
        if intake is None or sent is None or len(chain) != 8:
            continue  # a retried or unfinished order: not the straight path
        add("1 service bus wait", intake.start_time / 1e9 - sent)
        previous = None
        own: dict[str, float] = {}
        for i, s in enumerate(chain):
            name = s.name if s.name != "scheduler reply" else f"scheduler reply {i // 2}"
            label = f"{i + 1} {name}"
            own[label] = (s.end_time - s.start_time) / 1e9
            if previous is not None and s.end_time <= previous[1].end_time:
                # Inside the previous span: handed over in the same invocation (intake's
                # start), so no queue between them, and the outer span's own time is what is
                # left of it. (A message's receiver may start before its sender's span ends,
                # which still confirms its outbox, but it does not finish first.)
                own[previous[0]] -= own[label]
            elif previous is not None:
                add(f"{i + 1} queue wait before {name}",
                    (s.start_time - previous[1].end_time) / 1e9)
            previous = (label, s)
        for label, seconds in own.items():
            add(label, seconds)
        for call in (s for s in trace_spans if s.kind.name == "CLIENT"):
            add(f"remote call {call.name}", (call.end_time - call.start_time) / 1e9)
        add("total", chain[-1].end_time / 1e9 - sent)
    medians = {k: statistics.median(v) for k, v in sorted(hops.items())}
    return {"rate": STEADY_RATE, "orders": len(hops.get("total", [])),
            "median_s": medians,
            "queue_waits_s": sum(v for k, v in medians.items()
                                 if "wait" in k),
            "functions_s": sum(v for k, v in medians.items()
                               if k[0].isdigit() and "wait" not in k)}


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


def every_request_seconds(costs: dict[str, Any], simulators: dict[str, float],
                          ceiling: dict[str, float]) -> dict[str, float]:
    """Azurite's seconds per order for every request the run makes to it, each at the rate
    it serves that kind (8 threads, `Bench.ceiling`): 1 / the sum is the most orders a
    second this Azurite could take if nothing else limited them.

    A receive of k messages costs what one of a single message does, plus (k - 1) times
    the extra a message adds to a full batch's receive."""
    one = 1 / ceiling["queue_receives_1_per_s"]
    per_extra = max(0.0, (1 / ceiling[f"queue_receives_{BATCH}_per_s"] - one) / (BATCH - 1))
    # The Service Bus stand-in's requests are not storage transactions, but Azurite serves them.
    sb = costs[SERVICE_BUS_STAND_IN]
    receives = costs["queue_receives"] + sb.get("receive", 0.0)
    deletes = costs["queue_deletes"] + sb.get("delete", 0.0)
    received = deletes + costs["queue_updates"] + sb.get("update", 0.0)
    # An entity-group transaction is its own kind: one request, but a multipart body for
    # Azurite to parse and, in the SDK, a thread pool per part list to build and read it.
    batches = costs["write_breakdown"].get("table.batch", 0.0)
    return {
        "table_writes": ((costs["table_writes"] - batches) / ceiling["conditional_writes_per_s"]
                         + batches / ceiling["transactions_per_s"]),
        "table_reads": costs["table_reads"] / ceiling["point_reads_per_s"],
        # The Service Bus message: sent, received and settled in this Azurite too.
        "queue_sends": (costs["queue_sends"] + 1) / ceiling["queue_sends_per_s"],
        "queue_receives": receives * one + max(0.0, received - receives) * per_extra,
        "queue_deletes": deletes / ceiling["queue_deletes_per_s"],
        "queue_empty_polls": ((costs["queue_empty_polls"] + sb.get("receive.empty", 0.0))
                              / ceiling["empty_polls_per_s"]),
        "simulated_services": (simulators["table_writes"] / ceiling["conditional_writes_per_s"]
                               + simulators["table_reads"] / ceiling["point_reads_per_s"]),
    }


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


# Busy cores above which a process counts as the limit (cpu_limit).
AZURITE_BUSY, PYTHON_BUSY = 0.9, 0.75
# Busy cores, of all the processes the bench measures, past which the machine is the limit.
MACHINE_BUSY = 0.8


def _ceiling_rates(before: dict[str, float], after: dict[str, float]) -> str:
    kinds = [("conditional_writes_per_s", "conditional table writes/s"),
             ("transactions_per_s", "entity-group transactions (two entities)/s"),
             ("point_reads_per_s", "point reads/s"), ("queue_sends_per_s", "queue sends/s"),
             ("queue_receives_1_per_s", "receives of one message/s"),
             (f"queue_receives_{BATCH}_per_s", f"receives of {BATCH}/s"),
             ("queue_deletes_per_s", "deletes/s"), ("empty_polls_per_s", "empty polls/s")]
    return ", ".join(f"{before[k]:.0f} / {after[k]:.0f} {label}" for k, label in kinds)


def ratio_by_side(tp: dict[str, Any]) -> str:
    """The ratio against the ceilings measured before and after the run, each alone."""
    sides = tp.get("ratio_to_every_request_bound_by_side")
    if not sides:  # a report from an earlier bench, priced again
        return ""
    return (f"{sides['before']:.0%} against the ceilings measured before the run alone and "
            f"{sides['after']:.0%} against those after it, so far did the machine's speed move "
            "between them; ")


def _cpu_line(tp: dict[str, Any]) -> str:
    """Which process was the limit, in the ceiling and in the run: busy cores of each."""
    c = tp["cpu_cores"]
    if "azurite" not in c["run"]:
        return "CPU: Azurite's process was not measured."
    b, run, a = c["ceiling_before"], c["run"], c["ceiling_after"]
    ms = tp["cpu_ms_per_order"]
    worker = ""
    if "worker_process" in run:
        worker = (f" and {run['worker_process']:.2f} of the worker process (the functions, the "
                  f"simulated services' included), {ms['worker_process']:.0f} ms per order")
    return (f"CPU, in busy cores of Azurite / of the bench's process (the local host, the "
            f"harness and, without a worker process, the functions: Python, one GIL): ceiling "
            f"before {b['azurite']:.2f} / {b['bench_process']:.2f}, run {run['azurite']:.2f} / "
            f"{run['bench_process']:.2f}, ceiling after {a['azurite']:.2f} / "
            f"{a['bench_process']:.2f}; per order {ms['azurite']:.0f} ms of Azurite and "
            f"{ms['bench_process']:.0f} ms of the bench's process"
            + _roles_part(tp.get("cpu_ms_per_order_by_role", {})) + worker + ". "
            + cpu_limit(run))


def _roles_part(by_role: dict[str, float]) -> str:
    if not by_role:
        return ""
    return " (" + ", ".join(f"{ROLE_NAMES.get(role, role)} {ms:.0f}"
                            for role, ms in sorted(by_role.items(), key=lambda kv: -kv[1])) + ")"


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


def cpu_limit(cores: dict[str, float], machine_cores: int | None = None) -> str:
    # Azurite serves from one Node.js event loop, and one GIL lets the Python process's threads
    # use about one core: near it, each is the limit.
    if cores["azurite"] >= AZURITE_BUSY:
        return "Azurite was busy near a whole core in the run: it was the limit."
    busiest = max(("worker_process", "bench_process"), key=lambda p: cores.get(p, 0.0))
    machine = machine_cores or os.cpu_count() or 1
    if cores.get(busiest, 0.0) >= PYTHON_BUSY:
        name = "the worker process" if busiest == "worker_process" else "the Python process"
        return (f"Azurite was not the limit: {name}, near one core, and the "
                f"{machine} cores it shares with Azurite were.")
    # Three processes on two cores: none gets a whole one, and all of them are still the limit.
    busy = sum(cores.values())
    if busy >= MACHINE_BUSY * machine:
        return (f"No one process was near a whole core, but together they kept {busy:.2f} of "
                f"the machine's {machine} cores busy: the cores they share were the limit, so "
                "every millisecond of CPU an order spends besides its requests (the functions' "
                "own work, the hand-offs to the worker process, the simulated services' HTTP "
                "server) is taken from the requests the bound counts.")
    return "Neither process was near a whole core in the run: the limit was elsewhere."


def write_report(out: Path, results: dict[str, Any], throughput_run: Run | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "report.md").write_text(markdown(results))
    if throughput_run is not None:
        chart(out / "chart.png", throughput_run)


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [f"# Benchmark report ({r['when']})", "",
             f"Machine: {m['cpus']} cores, {m['platform']}, Python {m['python']}; Azurite "
             "on the same machine. Scale: " + ", ".join(f"{k}={v}" for k, v in r["scale"].items()),
             "", "## Transactions per order", "",
             "| workflow | transient faults | table writes | table reads (Scheduler / "
             "Supervisor / all) | queue sends | receives | empty polls | deletes |",
             "|---|---|---|---|---|---|---|---|"]
    for t in r["transactions"]:
        lines.append(
            f"| {t['workflow']} | {t['transient_fault_rate']:.0%} | {t['table_writes']:.2f} | "
            f"{t['scheduler_table_reads']:.2f} / {t['supervisor_table_reads']:.2f} / "
            f"{t['table_reads']:.2f} | {t['queue_sends']:.2f} | {t['queue_receives']:.2f} | "
            f"{t['queue_empty_polls']:.2f} | {t['queue_deletes']:.2f} |")
    three = next(t for t in r["transactions"] if t["workflow"] == "3-step"
                 and not t["transient_fault_rate"])
    lines += ["", "Writes of the 3-step order without faults: " + ", ".join(
        f"{k} {v:.2f}" for k, v in three["write_breakdown"].items()) + ". The floor is 5 (one "
        "atomic intake, one conditional write per transition); two more are the in-flight "
        "index entry (written at intake, deleted when the order settles), which keeps a "
        "Supervisor tick independent of history; three more (merges, counted as table.write) "
        "confirm that the outboxes dispatching a step were sent, which lets the Supervisor "
        "re-send a lost request without spending the order's FailureThreshold (README, "
        "\"What follows a write\").",
        "Empty polls are the host looking at idle queues: they grow with time, not orders.",
        "Not in the table: the requests of the local host's stand-in for Service Bus (a Storage "
        "queue here, Service Bus operations in Azure), per 3-step order without faults: "
        + ", ".join(f"{k} {v:.2f}" for k, v in three[SERVICE_BUS_STAND_IN].items()) + ".", ""]
    lines += [_targets(r), "", "## Throughput and latency", ""]
    tp = r["throughput"]
    lines += [
        f"- {tp['orders']} orders, no faults, the functions in a worker process of their own "
        f"(as in Azure): **{tp['orders_per_s']:.1f} orders/s** end to end "
        f"({tp['elapsed_s']:.1f} s).",
        "- Ceiling of this Azurite, measured before and after the run (8 threads each; the "
        "bound takes each rate's mean), one client process: "
        + _ceiling_rates(r["ceiling"], tp["ceiling_after"]) + "; two client processes at once "
        "(each phase begun together): "
        + _ceiling_rates(tp["ceiling_two_processes"], tp["ceiling_after_two_processes"]) + ".",
        f"- Bound they imply for every request the run makes of Azurite, each at its kind's "
        f"better rate of one and two processes (a receive by the messages it brings; the "
        f"simulated services' own writes included, since the same Azurite serves them): "
        f"{tp['bound_every_request_orders_per_s']:.1f} orders/s, of Azurite's ms per order "
        + ", ".join(f"{k.replace('_', ' ')} {v * 1000:.1f}"
                    for k, v in tp["every_request_seconds_per_order"].items())
        + f"; achieved **{tp['ratio_to_every_request_bound']:.0%}** of it ("
        + ratio_by_side(tp) + "of one client "
        f"process's rates alone, as until 2026-11-23: {tp['bound_one_process_orders_per_s']:.1f} "
        f"orders/s, {tp['ratio_to_one_process_bound']:.0%}; of writes and "
        f"send+receive+delete cycles alone, as at first: {tp['bound_orders_per_s']:.1f} "
        f"orders/s, {tp['ratio_to_bound']:.0%}).",
        "- " + _cpu_line(tp),
        "- The functions' CPU per order, by function (the invoking thread's, SDK calls "
        "included), ms: " + ", ".join(
            f"{name} {ms:.1f}" for name, ms in tp.get("cpu_ms_per_order_by_function", {}).items())
        + ".",
        f"- Latency send → Processed, all {tp['orders']} sent at once: p50 "
        f"{tp['latency_s']['p50']:.2f} s, p95 {tp['latency_s']['p95']:.2f} s, p99 "
        f"{tp['latency_s']['p99']:.2f} s (mostly waiting in queues behind the burst).",
        f"- Latency at a steady {tp['steady_rate']:.0f} orders/s ({tp['steady_orders']} "
        f"orders): p50 {tp['steady_latency_s']['p50']:.2f} s, p95 "
        f"{tp['steady_latency_s']['p95']:.2f} s, p99 {tp['steady_latency_s']['p99']:.2f} s.",
        f"- Peak resident memory of the bench process (local host and harness): "
        f"{r['memory_peak_mb']:.0f} MB.", "", "## Supervisor cost", ""]
    s = r["supervisor"]
    lines += [
        "| store | entities read | tick time |", "|---|---|---|",
        f"| {s['expired']} expired steps | {s['before']['entities_read']} | "
        f"{s['before']['seconds'] * 1000:.0f} ms |",
        f"| + {s['completed_added']} completed orders | {s['after']['entities_read']} | "
        f"{s['after']['seconds'] * 1000:.0f} ms |",
        f"| the same, once more | {s['alone']['entities_read']} | "
        f"{s['alone']['seconds'] * 1000:.0f} ms |",
        f"| + {s['idle_in_flight']} in flight, not due | {s['with_idle']['entities_read']} | "
        f"{s['with_idle']['seconds'] * 1000:.0f} ms |", "",
        f"Ratio: entities {s['entities_ratio']:.2f}, time {s['time_ratio']:.2f} with the "
        f"completed orders; time {s['with_idle_time_ratio']:.2f} with the orders not due. The "
        "tick reads, by key range, the due-time index entries whose time has come (one query per "
        "index partition) and the state record of each, and acts on each overdue one (a write "
        "and a message). Every tick does the same work (the same orders, rescued)"
        + (f"; each time is the middle of {s['ticks']} ticks" if s.get("ticks", 1) > 1 else "")
        + ". With the completed orders: "
        + _azurite_slowed(s["before"], s["after"], s["expired"]),
        "", "## Recovery", ""]
    rc = r["recovery"]
    lines += [
        f"Agents silent for {rc['silent_rate']:.0%} of requests ({rc['orders']} orders at "
        f"{STEADY_RATE:.0f}/s, "
        f"{rc['orders_with_lost_steps']} lost at least one step, {rc['failed_orders']} failed): "
        f"time added per lost step p50 {rc['recovery_per_lost_step_s']['p50']:.1f} s, p95 "
        f"{rc['recovery_per_lost_step_s']['p95']:.1f} s, against complete-by "
        f"{rc['budget_s']} s + supervisor interval {rc['supervisor_interval_s']} s + first "
        f"backoff {rc['first_backoff_s']} s = {rc['expected_s']} s. (Measured as an order's "
        "latency minus the median latency of orders without a loss, per loss.)", ""]
    st = r.get("starvation")
    if st:
        lines += ["## A backlog while every remote call hangs", "",
                  f"{st['backlog']} orders sent while every remote call hangs past its "
                  f"{st['step_budget_s']} s budget; then for {st['window_s']:.0f} s, /health "
                  "asked every half second and the Supervisor due every second:", "",
                  "| worker threads | /health p50 | /health max | answered | Supervisor ticks "
                  "(due) |", "|---|---|---|---|---|"]
        for label in ("deployed", "worker_default"):
            x = st[label]
            lines.append(f"| {x['threads']} ({label.replace('_', ' ')}) | "
                         f"{x['health_s']['p50']:.2f} s | {x['health_s']['max']:.2f} s | "
                         f"{x['health_s']['answered']}/{x['health_s']['asked']} | "
                         f"{x['supervisor_ticks']} ({x['supervisor_ticks_due']}) |")
        lines.append("")
    three = next(t for t in r["transactions"] if t["workflow"] == "3-step"
                 and not t["transient_fault_rate"])
    if "log_records" in three:
        lines += ["## Log records per order", "",
                  f"3-step order without faults: {three['log_records']:.1f} records "
                  f"({three['log_bytes']:.0f} bytes of message) from the app, as the worker would "
                  f"forward them, plus about {three['host_log_records']:.0f} from the host "
                  f"(Executing/Executed for {three['invocations']:.1f} invocations). By logger: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in three["log_records_by_logger"].items())
                  + ".", ""]
    lb = r.get("latency_breakdown")
    if lb:
        lines += ["## Latency, hop by hop", "",
                  f"{lb['orders']} orders at {lb['rate']:.0f}/s that went straight through; "
                  f"median seconds per hop (send -> Processed median {lb['median_s']['total']:.2f}"
                  f" s: queue waits {lb['queue_waits_s']:.2f} s, functions "
                  f"{lb['functions_s']:.2f} s, remote calls inside the Agents):", "",
                  "| hop | median s |", "|---|---|",
                  *[f"| {k} | {v:.3f} |" for k, v in lb["median_s"].items() if k != "total"],
                  ""]
    tr = r.get("tracing")
    if tr:
        sec = tr["seconds_per_order"]
        lines += ["## Tracing", "",
                  f"One trace per order, {tr['orders']} fault-free 3-step orders: "
                  f"{tr['spans_per_order']:.1f} spans and {tr['span_events_per_order']:.1f} span "
                  f"events per order, so about {tr['telemetry_items_per_order']:.0f} Application "
                  "Insights items per order with the Azure Monitor exporter (plus "
                  f"{tr['sender_and_service_spans_per_order']:.0f} from the sender and the "
                  "simulated services). "
                  f"Time per order in a batch: {sec['off'] * 1000:.0f} ms untraced, "
                  f"{sec['on'] * 1000:.0f} ms traced ({tr['overhead']:+.0%}). Spans per order: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in tr["spans_by_name_per_order"].items())
                  + ".", ""]
    lines += cost_markdown(r.get("cost"))
    if r.get("notes"):
        lines += ["## Notes", "", *[f"- {n}" for n in r["notes"]], ""]
    return "\n".join(lines)


def cost_markdown(co: dict[str, Any] | None) -> list[str]:
    """The report's section on what an order costs, and at the prices given, a million."""
    if not co:
        return []
    labels = list(co["quantities_per_order"])
    q = co["quantities_per_order"]
    lines = ["## What an order costs", "",
              "Per order, what Azure bills (execution time estimated for instances of "
              f"{co['instance_memory_mb']} MB busy at this run's throughput):", "",
              "| per order | " + " | ".join(labels) + " |",
              "|---|" + "---|" * len(labels),
              *[f"| {k.replace('_', ' ')} | " + " | ".join(f"{q[lb][k]:.4g}" for lb in labels)
                + " |" for k in q[labels[0]]], ""]
    if co["per_million_orders_usd"]:
        pr = co["prices"]
        lines += [f"A million orders at the prices of {pr['source']} ({pr['region']}, "
                  f"{pr['date']}): " + "; ".join(
                      f"{lb} **${v:,.2f}**" for lb, v in co["per_million_orders_usd"].items())
                  + ". Parts: " + "; ".join(
                      f"{lb}: " + ", ".join(f"{k.replace('_', ' ')} ${v:,.2f}"
                                            for k, v in parts.items())
                      for lb, parts in co["parts"].items()) + ".", ""]
    else:
        lines += ["No prices given (`--prices FILE`, see localrun/cost.py; with `--price-only` "
                  "they price this report without running it again): the quantities above "
                  "times your region's unit prices are the bill.", ""]
    return lines


def _targets(r: dict[str, Any]) -> str:
    latency_target = (f"send → Processed p50 at {STEADY_RATE:g} orders/s ≤ "
                      f"{TARGETS['steady_p50_s']} s")
    three = next(t for t in r["transactions"] if t["workflow"] == "3-step"
                 and not t["transient_fault_rate"])
    checks = [
        (f"table writes ≤ {TARGETS['table_writes']} (besides the Supervisor's tick log)",
         three["table_writes"] - three["supervisor_table_writes"] <= TARGETS["table_writes"]),
        ("Scheduler table reads ≤ 4", three["scheduler_table_reads"]
         <= TARGETS["scheduler_table_reads"]),
        ("queue messages sent ≤ 7", three["queue_sends"] <= TARGETS["queue_sends"]),
        ("throughput ≥ 80% of the ceiling", r["throughput"]["ratio_to_every_request_bound"]
         >= TARGETS["throughput_ratio"]),
        ("Supervisor: 10,000 completed change tick time ≤ 1.2x", r["supervisor"]["time_ratio"]
         <= TARGETS["tick_time_ratio"]),
        ("Supervisor: with 10,000 in flight not due, entities per tick ≤ 2 x overdue + 10",
         r["supervisor"]["with_idle"]["entities_read"]
         <= 2 * r["supervisor"]["expired"] + TARGETS["entities_beyond_overdue"]),
        ("Supervisor: 10,000 in flight not due change tick time ≤ 1.2x",
         r["supervisor"]["with_idle_time_ratio"] <= TARGETS["tick_time_ratio"]),
        (latency_target, r["throughput"]["steady_latency_s"]["p50"] <= TARGETS["steady_p50_s"]),
    ]
    lines = ["Targets: " + "; ".join(f"{name}: {'met' if ok else '**missed**'}"
                                     for name, ok in checks) + "."]
    tp, sup = r["throughput"], r["supervisor"]
    sides = ratio_by_side(tp).removesuffix("; ")
    why = {
        "throughput ≥ 80% of the ceiling": (
            f"Throughput reached {tp['ratio_to_every_request_bound']:.0%} of a bound that counts "
            "every request an order makes at the better rate this Azurite served one client "
            "process and two at once (the app is two: the host's and the worker's"
            + (f"; {sides}" if sides else "") + "); "
            f"{tp['ratio_to_one_process_bound']:.0%} of one process's rates alone. "
            + _cpu_line(tp)),
        "Supervisor: 10,000 in flight not due change tick time ≤ 1.2x": (
            f"Entities read did not change ({sup['alone']['entities_read']} → "
            f"{sup['with_idle']['entities_read']}), nor did any request; the time did "
            f"({sup['with_idle_time_ratio']:.2f}x). "
            + _azurite_slowed(sup["alone"], sup["with_idle"], sup["expired"])),
        "Supervisor: 10,000 completed change tick time ≤ 1.2x": (
            f"Entities read did not change ({sup['before']['entities_read']} → "
            f"{sup['after']['entities_read']}), nor did any request; the time did "
            f"({sup['time_ratio']:.2f}x). "
            + _azurite_slowed(sup["before"], sup["after"], sup["expired"])),
    }
    lb = r.get("latency_breakdown") or {}
    if lb.get("median_s"):
        waits = [k for k in lb["median_s"] if "wait" in k]
        why[latency_target] = (
            f"p50 {r['throughput']['steady_latency_s']['p50']:.2f} s. Of the straight path's "
            f"{lb['median_s']['total']:.2f} s, {lb['queue_waits_s']:.2f} s is waiting in "
            f"{len(waits)} queues (Service Bus and the Storage queues the host polls) and "
            f"{lb['functions_s']:.2f} s is the functions themselves: with no queue wait at all "
            f"it would be about {lb['median_s']['total'] - lb['queue_waits_s']:.2f} s. Tried: "
            "intake takes the order to its first step in its own invocation (one queue fewer); "
            "the Agents reply on an output binding, which wakes the Scheduler's listener as the "
            "Functions host's shared queue watcher does. Left: each request to an Agent waits "
            "for that Agent's listener to poll, because the relay sends it and then confirms "
            "it (the Supervisor's proof that it was sent), which an output binding, sent after "
            "the function returns, cannot give; polling faster would cost transactions while "
            "idle (README, Performance).")
    lines += [f"- Missed: {why.get(name, name)}" for name, ok in checks if not ok]
    return "\n".join(lines)


def _azurite_slowed(a: dict[str, Any], b: dict[str, Any], reads: int) -> str:
    """Why the same tick took longer with more in the tables: the emulator's own times for the
    same requests, before and after, with the control that shows where its time went."""
    def ms(tick: dict[str, Any], key: str) -> str:
        return f"{tick[key] * 1000:.0f}"

    text = (f"Azurite's own point reads of the same {reads} records went from "
            f"{ms(a, 'azurite_point_reads_s')} to {ms(b, 'azurite_point_reads_s')} ms and "
            f"the tick's range queries from {ms(a, 'azurite_due_queries_s')} to "
            f"{ms(b, 'azurite_due_queries_s')} ms. ")
    if "azurite_control_reads_s" not in a:  # a report from a bench before the control
        return text + "The emulator scans where Table Storage seeks by key."
    return text + (
        "Azurite finds an entity through its row-key index and then scans every entity "
        f"that shares the row key, and every state record's row key is \"state\": {reads} "
        "reads of entities in the same table, each with a row key of its own, took "
        f"{ms(a, 'azurite_control_reads_s')} and {ms(b, 'azurite_control_reads_s')} ms. Its "
        "range queries filter the whole table. Table Storage seeks both by key: the tick's "
        "work is the same.")


def chart(path: Path, run: Run) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    if run.completions:
        width = max(1, int(run.completions[-1]) + 1)
        a.hist(run.completions, bins=width, color="#2b6cb0")
    a.set_title(f"Throughput: orders settled per second ({run.orders} orders)")
    a.set_xlabel("seconds since the first order was sent")
    a.set_ylabel("orders")
    lat = sorted(run.latencies())
    if lat:
        b.plot(lat, [i / len(lat) for i in range(1, len(lat) + 1)], color="#2f855a")
        for p in (50, 95, 99):
            b.axvline(percentile(lat, p), linestyle="--", linewidth=0.8, color="grey")
            b.text(percentile(lat, p), 0.05, f"p{p}", rotation=90)
    b.set_title("Latency, send → Processed (CDF)")
    b.set_xlabel("seconds")
    b.set_ylabel("fraction of orders")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def instance_memory_mb() -> int:
    """The instance memory size the Bicep deploys (infra/main.bicep)."""
    bicep = (ROOT / "infra" / "main.bicep").read_text()
    m = re.search(r"param instanceMemoryMB int = (\d+)", bicep)
    if m is None:
        raise RuntimeError("infra/main.bicep no longer declares instanceMemoryMB with a default")
    return int(m.group(1))


def cost_of(r: dict[str, Any], prices: dict[str, Any] | None) -> dict[str, Any]:
    from localrun import cost

    memory = instance_memory_mb()
    rows = {("3-step" + (", 20% transient faults" if t["transient_fault_rate"] else "")): t
            for t in r["transactions"] if t["workflow"] == "3-step"}
    q = {label: cost.quantities(t, r["throughput"]["orders_per_s"], memory, r.get("tracing"))
         for label, t in rows.items()}
    out: dict[str, Any] = {"instance_memory_mb": memory, "quantities_per_order": q,
                           "per_million_orders_usd": None, "parts": None, "prices": None}
    if prices is not None:
        priced = {label: cost.priced(v, prices) for label, v in q.items()}
        out.update(per_million_orders_usd={k: v["per_million_orders_usd"]
                                           for k, v in priced.items()},
                   parts={k: v["parts"] for k, v in priced.items()},
                   prices=next(iter(priced.values()))["prices"])
    return out


def reprice(out: Path, prices: dict[str, Any]) -> dict[str, Any]:
    """Price the report a run left in ``out`` again, without running anything: the quantities
    were measured once, and prices change. Rewrites report.json and report.md (not the chart)."""
    path = out / "report.json"
    try:
        results = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"no report to price in {out}/: run `make bench` first") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a report ({e})") from None
    if not isinstance(results, dict):
        raise ValueError(f"{path}: not a bench report")
    missing = [k for k in ("transactions", "throughput", "machine", "scale") if k not in results]
    if missing:
        raise ValueError(f"{path}: not a full bench report (no {', '.join(missing)})")
    try:
        results["cost"] = cost_of(results, prices)
        # Rendered once before anything is written: a report that cannot be shown again is
        # left as it was, not half rewritten.
        markdown(results)
    except (KeyError, TypeError) as e:  # a report from an older bench, or edited by hand
        raise ValueError(f"{path}: cannot price this report (no {e}): run `make bench` "
                         "again") from None
    write_report(out, results, None)
    return results


def run_bench(out: Path, scale: Scale, prices: dict[str, Any] | None = None) -> dict[str, Any]:
    import logging

    from localrun.azurite import Azurite

    logging.basicConfig(level=logging.ERROR, force=True)
    data = ROOT / ".azurite" / "bench"
    import shutil

    shutil.rmtree(data, ignore_errors=True)
    az = Azurite.start(location=data)
    os.environ.setdefault("AzureWebJobsStorage", az.connection_string)
    os.environ.setdefault("SimulatorsEnabled", "true")  # indexed only when on (function_app.py)
    sys.path.insert(0, str(ROOT))
    results: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "scale": scale.__dict__, "targets": TARGETS,
    }
    try:
        b = Bench(az.connection_string, scale, azurite_pid=az.process.pid)
        step = _Progress()
        step("transactions per order")
        results["transactions"] = b.transactions()
        step("ceiling of this Azurite")
        with b.cpu_use() as ceiling_cpu:
            results["ceiling"] = b.ceiling()
        # Reported with the throughput it bounds (throughput.ceiling_two_processes).
        ceiling_two = b.ceiling_in(2)
        step("throughput and latency")
        results["throughput"], run = b.throughput(results["ceiling"], ceiling_cpu.cores,
                                                  ceiling_two)
        results["memory_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        step("supervisor cost")
        results["supervisor"] = b.supervisor()
        step("recovery")
        results["recovery"] = b.recovery()
        step("a backlog while every remote call hangs")
        results["starvation"] = b.starvation()
        step("tracing")
        results["tracing"] = b.tracing()
        step("latency, hop by hop")
        results["latency_breakdown"] = b.latency_breakdown()
        results["cost"] = cost_of(results, prices)
        write_report(out, results, run)
        step.done()
    finally:
        az.stop()
        shutil.rmtree(data, ignore_errors=True)
    return results


class _Progress:
    def __init__(self) -> None:
        self._t = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, what: str) -> None:
        print(f"[{time.monotonic() - self._t:6.1f}s] {what} ...", flush=True)

    def done(self) -> None:
        print(f"[{time.monotonic() - self._t:6.1f}s] done", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localrun bench")
    p.add_argument("--out", type=Path, default=ROOT / "bench-report")
    p.add_argument("--smoke", action="store_true", help="a few orders: checks the bench runs")
    p.add_argument("--prices", type=Path, default=None, metavar="FILE",
                   help="unit prices (JSON; see localrun/cost.py) to price a million orders")
    p.add_argument("--price-only", action="store_true",
                   help="run nothing: price the report already in --out with --prices")
    args = p.parse_args(argv)
    from localrun import cost

    if args.price_only and not args.prices:
        p.error("--price-only needs --prices FILE")
    try:
        prices = cost.load_prices(args.prices) if args.prices else None
        if args.price_only and prices is not None:  # without prices, p.error above
            print("\n".join(cost_markdown(reprice(args.out, prices)["cost"])))
            return 0
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results = run_bench(args.out, Scale.smoke() if args.smoke else Scale(), prices)
    print((args.out / "report.md").read_text())
    del results
    return 0
