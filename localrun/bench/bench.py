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
app still run?); a backlog through a service limited to 4 calls at once and 20 a second;
log records per order, as the worker would forward them; peak memory; and the
bill by meter at the shipped prices (docs/azure-prices.json) or at ``--prices FILE``.

The command line and the run are here; the load driver is driver.py, the ceiling and the
throughput ceiling.py, the other scenarios scenarios.py, the report report.py and the prices
cost.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from localrun.bench import cost
from localrun.bench.ceiling import best_rates, every_request_seconds
from localrun.bench.driver import BATCH, ROOT, TARGETS, Scale, per_order, thread_role
from localrun.bench.limiting import limit_run, limited_service
from localrun.bench.report import (
    _azurite_slowed,
    cost_markdown,
    cpu_limit,
    markdown,
    ratio_by_side,
    write_report,
)
from localrun.bench.scenarios import Bench

# What the tests and other modules import from here, as before the split.
__all__ = [
    "BATCH",
    "Bench",
    "Scale",
    "_azurite_slowed",
    "best_rates",
    "cpu_limit",
    "every_request_seconds",
    "instance_memory_mb",
    "main",
    "per_order",
    "ratio_by_side",
    "reprice",
    "run_bench",
    "thread_role",
]

instance_memory_mb = cost.instance_memory_mb


def cost_of(r: dict[str, Any], prices: dict[str, Any]) -> dict[str, Any]:
    return cost.report_cost(r, prices)


def reprice(out: Path, prices: dict[str, Any]) -> dict[str, Any]:
    """Price the report a run left in ``out`` again, without running anything: the quantities
    were measured once, and prices change. Rewrites report.json and report.md (not the chart)."""
    path = out / "report.json"
    try:
        results = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"no earlier bench report in {out}/ to price: run `make bench` "
                         "first") from None
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
    """Every scenario, then the report in ``out``, priced at ``prices`` (the shipped ones
    without)."""
    import logging

    from localrun.azurite import Azurite

    logging.basicConfig(level=logging.ERROR, force=True)
    data = ROOT / ".azurite" / "bench"

    shutil.rmtree(data, ignore_errors=True)
    az = Azurite.start(location=data)
    os.environ.setdefault("AzureWebJobsStorage", az.connection_string)
    os.environ.setdefault("SimulatorsEnabled", "true")  # indexed only when on (function_app.py)
    # The key the app's calls to the simulators carry (a code service's local one too), as the local
    # template gives it: function_app checks at import that every code service has its settings.
    os.environ.setdefault("RemoteServiceKey", json.loads(
        (ROOT / "local.settings.template.json").read_text())["Values"]["RemoteServiceKey"])
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
        step("limits per service")
        results["limits"] = limit_run(b, scale.limit_orders, limited_service(), 4, 20)
        step("tracing")
        results["tracing"] = b.tracing()
        step("latency, hop by hop")
        results["latency_breakdown"] = b.latency_breakdown()
        results["cost"] = cost_of(results, prices or cost.load_prices())
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
                   help="unit prices (JSON, the keys of docs/prices.template.json) instead of "
                        "the shipped docs/azure-prices.json")
    p.add_argument("--price-only", action="store_true",
                   help="run nothing: price the report already in --out again")
    args = p.parse_args(argv)
    try:
        prices = cost.load_prices(args.prices)
        if args.price_only:
            print("\n".join(cost_markdown(reprice(args.out, prices)["cost"])))
            return 0
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results = run_bench(args.out, Scale.smoke() if args.smoke else Scale(), prices)
    print((args.out / "report.md").read_text())
    del results
    return 0
