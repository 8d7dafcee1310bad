"""The ceiling of the Azurite the bench runs on (the rate it serves each kind of request), the
bound on orders a second it implies, and the throughput run measured against it."""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from localrun.bench.driver import (
    BATCH,
    STEADY_RATE,
    BenchBase,
    Run,
    Scale,
    per_order,
    percentile,
    simulators_per_order,
)
from localrun.metering import (
    SERVICE_BUS_STAND_IN,
)


class Ceiling(BenchBase):
    """What this Azurite serves at most, and the throughput run measured against it."""

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
        # message does not take the functions' GIL (localrun/host/worker.py).
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


def _ceiling_client(connection: str, scale: Scale, barrier: Any, results: Any) -> None:
    """Another client process of Bench.ceiling_in."""
    results.put(Ceiling(connection, scale).ceiling(sync=lambda: barrier.wait(timeout=300)))


def best_rates(*ceilings: dict[str, float]) -> dict[str, float]:
    """For each kind of request, the best rate any of these ceilings reached: the bound prices
    every request at what this Azurite was seen to serve."""
    return {kind: max(c[kind] for c in ceilings) for kind in ceilings[0]}


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


