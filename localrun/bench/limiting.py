"""A service's limit under load (`make limit-run`, and the bench's "Limits per service"): a
backlog of orders through the local host, with the service unlimited and then limited by its
settings (<Service>CallsAtOnce, <Service>CallsPerSecond). What it measures, at the service's
side: the most calls it had at once, the most begun in any one second; and what each call cost
in storage transactions to be held to the limit (the service's Agent's table requests per
call, less the unlimited run's).

    python -m localrun.bench.limiting [--orders 200] [--service NAME] [--at-once 4]
                                      [--per-second 20]

It starts its own Azurite; the simulated service answers in 100 ms, so that calls overlap.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from datetime import UTC, datetime
from functools import partial
from typing import Any

from localrun.bench.driver import Run, Scale, own_azurite
from localrun.bench.scenarios import Bench
from localrun.metering import READS, is_table_write
from shared.settings import limit_setting_names

# The simulated service's answer time: long enough that calls overlap at the rates measured.
LATENCY_MS = "100"


class Seen:
    """Every call to the service, with when it began and ended (wall clock): as the app's Agent
    made it (``sent``), and as the simulated service took it (``calls``), which in the local
    host is later by the wait for one of the worker's threads the Agents share (as in a demo
    deployment; a provider elsewhere sees the sending plus its network's jitter)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []
        self.sent: list[tuple[float, float]] = []
        self.granted: list[tuple[float, float]] = []  # the limiter's starts
        self._lock = threading.Lock()

    def watch(self, c: Any, service: str) -> None:
        """Wrap the service's Agent's client, and the container's simulator of ``service``: an
        HTTP service's, or the simulated provider a code service calls."""
        target = c.provider if service in c.workflows.code_services else c.simulator
        handle = target.handle

        def observed(name: str, *args: Any) -> Any:
            began = time.time()
            try:
                return handle(name, *args)
            finally:
                if name == service:
                    with self._lock:
                        self.calls.append((began, time.time()))

        target.handle = observed
        client = c.agents[service]._client
        call = client.call

        def sending(*args: Any) -> Any:
            began = time.time()
            try:
                return call(*args)
            finally:
                with self._lock:
                    self.sent.append((began, time.time()))

        client.call = sending
        limiter = c.agents[service]._limiter
        if limiter is not None:
            acquire = limiter.acquire

            def granting(*args: Any, **kwargs: Any) -> Any:
                grant = acquire(*args, **kwargs)
                with self._lock:
                    self.granted.append((grant.start, grant.start))
                return grant

            limiter.acquire = granting
            # Leases given back on the Agent's own thread, so that the meter counts those
            # requests as the Agent's (a thread of the limiter's is no function's to it).
            limiter._background = lambda release: release()



def limited_service() -> str:
    """The service the runs limit: the default workflow's last step's, called once an order."""
    from shared.workflows import REGISTRY

    return REGISTRY.get().steps[-1].service


def peak_at_once(calls: list[tuple[float, float]]) -> int:
    events = sorted([(b, 1) for b, _ in calls] + [(e, -1) for _, e in calls])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def most_in_a_second(calls: list[tuple[float, float]]) -> int:
    """The most calls begun in any one second (a sliding window, not the clock's seconds)."""
    starts = sorted(b for b, _ in calls)
    most, first = 0, 0
    for i, s in enumerate(starts):
        while starts[first] <= s - 1.0:
            first += 1
        most = max(most, i - first + 1)
    return most


def agent_requests(run: Run, service: str) -> dict[str, int]:
    ops = run.per_function.get(f"{service}_agent", {})
    return {"reads": sum(v for k, v in ops.items() if k in READS),
            "writes": sum(v for k, v in ops.items() if is_table_write(k))}


def limit_run(bench: Bench, orders: int, service: str, at_once: int | None,
              per_second: float | None, **overrides: str) -> dict[str, Any]:
    """The same backlog twice: the service unlimited, then limited."""
    at_once_key, per_second_key = limit_setting_names(service)
    out: dict[str, Any] = {"orders": orders, "service": service, "latency_ms": int(LATENCY_MS),
                           "limit": {"at_once": at_once, "per_second": per_second}}
    limited = {**({at_once_key: str(at_once)} if at_once else {}),
               **({per_second_key: str(per_second)} if per_second else {})}
    for label, limits in (("unlimited", {}), ("limited", limited)):
        seen = Seen()
        started = time.time()
        settings: dict[str, Any] = {"SimLatencyMs": LATENCY_MS, **limits, **overrides}
        run = bench.run_orders(f"lim{label[:2]}", orders,
                               during=partial(seen.watch, service=service), **settings)
        requests = agent_requests(run, service)
        calls = max(len(seen.calls), 1)
        out[label] = {
            "wall_s": round(time.time() - started, 1),
            "elapsed_s": round(run.elapsed, 1),
            "processed": sum(s["ProcessState"] == "Processed" for s in run.states),
            "failed": sum(s["ProcessState"] == "Error" for s in run.states),
            "calls": len(seen.calls),
            "granted_most_begun_in_a_second": most_in_a_second(seen.granted),
            "sent_peak_at_once": peak_at_once(seen.sent),
            "sent_most_begun_in_a_second": most_in_a_second(seen.sent),
            "service_peak_at_once": peak_at_once(seen.calls),
            "service_most_begun_in_a_second": most_in_a_second(seen.calls),
            "agent_table_reads_per_call": round(requests["reads"] / calls, 2),
            "agent_table_writes_per_call": round(requests["writes"] / calls, 2),
        }
    lim, free = out["limited"], out["unlimited"]
    out["limit_transactions_per_call"] = round(
        lim["agent_table_reads_per_call"] + lim["agent_table_writes_per_call"]
        - free["agent_table_reads_per_call"] - free["agent_table_writes_per_call"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localrun.bench.limiting")
    p.add_argument("--orders", type=int, default=200)
    p.add_argument("--service", default=None,
                   help="the service to limit (default: the default workflow's last step's)")
    p.add_argument("--at-once", type=int, default=4)
    p.add_argument("--per-second", type=float, default=20.0)
    args = p.parse_args(argv)
    with own_azurite("limit-run") as az:
        started = datetime.now(UTC).isoformat(timespec="seconds")
        result = limit_run(Bench(az.connection_string, Scale(), azurite_pid=az.process.pid),
                           args.orders, args.service or limited_service(), args.at_once or None,
                           args.per_second or None)
    print(json.dumps({"when": started, **result}, indent=2))
    lim = result["limited"]
    within = ((not args.at_once or lim["sent_peak_at_once"] <= args.at_once)
              and (not args.per_second
                   or lim["granted_most_begun_in_a_second"] <= int(args.per_second)))
    return 0 if within and lim["failed"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
