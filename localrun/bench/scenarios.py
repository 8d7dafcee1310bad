"""The bench's scenarios: transactions per order, tracing, latency hop by hop, the Supervisor's
cost, recovery, and a backlog while every remote call hangs."""

from __future__ import annotations

import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from localrun.bench.ceiling import Ceiling
from localrun.bench.driver import (
    ROOT,
    STEADY_RATE,
    TICKS,
    Run,
    _envelope_bytes,
    _order,
    per_order,
    percentile,
)
from shared.domain.state import ProcessState


class Bench(Ceiling):
    """Every scenario of the bench."""

    def transactions(self) -> list[dict[str, Any]]:
        from shared.domain.workflow import Workflow
        from shared.workflows import REGISTRY

        # The app's default workflow (the rows' "3-step", as shipped), and its first step alone.
        default = REGISTRY.get()
        one_step = Workflow("one-step", default.steps[:1], message=default.message)
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

        from shared import sampling, tracing
        from shared.settings import DEFAULT_SAMPLE_RATIO

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
        # The default: the app's OrderSampler at OrderTraceSampleRatio (shared/tracing.py), the
        # orders' traces kept whole by trace id; fault-free orders, so nothing is kept for
        # trouble. Its measured bytes are what the bill prices.
        sampled_exporter = InMemorySpanExporter()
        sampled = TracerProvider(sampler=sampling.OrderSampler(DEFAULT_SAMPLE_RATIO))
        sampled.add_span_processor(BatchSpanProcessor(sampled_exporter))
        tracing.use_provider(sampled)
        try:
            self.run_orders("trsampled", n)
            sampled.force_flush()
        finally:
            tracing.use_provider(None)
            sampled.shutdown()
        kept = [s for s in sampled_exporter.get_finished_spans()
                if s.name != "supervisor tick"
                and not s.name.startswith(("service ", "orders send"))]
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
            # The same orders at the default sample ratio: whole traces of a share of them.
            "sample_ratio": DEFAULT_SAMPLE_RATIO,
            "telemetry_bytes_per_order_sampled": _envelope_bytes(kept) / n,
            "orders_traced_sampled": len({s.context.trace_id for s in kept}),
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

    def supervisor(self) -> dict[str, Any]:
        from localrun.metering import StorageMeter
        from shared import bootstrap
        from shared.adapters.state_entity import state_to_entity
        from shared.domain.transitions import claim, receive
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
        # The Supervisor was running before these orders: its tick on an empty store is what a
        # deployed app with no orders pays each interval (cost.idle_quantities).
        meter.reset()
        t0 = time.perf_counter()
        c.supervisor.tick()
        idle_tick = {"seconds": time.perf_counter() - t0, **meter.snapshot()}
        past = clock_now[0] - timedelta(hours=1)
        for i in range(self.scale.expired_steps):
            o = parse_order(json.dumps(_order(f"late-{i:04d}")))
            s = store.create(o, receive(o.order_id, c.workflow, past))
            claimed = claim(s, "bench", past, c.workflow)
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
                "idle_tick": idle_tick,
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
        from localrun.host.host import LocalFunctionHost
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
                StepBudgetSeconds=_every_step(budget),
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
            StepBudgetSeconds=_every_step(budget),
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


def _every_step(seconds: int) -> str:
    """StepBudgetSeconds giving each step of the default workflow (the one the bench sends)
    ``seconds``, whatever its steps."""
    from shared.workflows import REGISTRY

    return ",".join(f"{s.name}={seconds}" for s in REGISTRY.get().steps)
