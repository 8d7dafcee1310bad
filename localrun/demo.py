"""`make demo`: the whole pipeline on this machine, with faults, in one command.

Starts a private Azurite (data in .azurite/demo, wiped first), runs the function app in the
local host (HTTP on http://localhost:7071/api, as `func start` would), sends a batch of orders
through the local orders channel with faults injected, shows progress live, and ends with a
summary read back from the store and the storage meter. Stops everything it started, on
Ctrl-C too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".azurite" / "demo"

NO_FAULTS = {"SimTransientErrorRate": "0", "SimPermanentErrorRate": "0", "SimHangRate": "0"}
DEMO_SETTINGS = {
    "SimulatorsEnabled": "true",
    "SimTransientErrorRate": "0.2",
    "SimPermanentErrorRate": "0.03",
    "SimHangRate": "0.02",
    "SimHangSeconds": "12",
    "SimLatencyMs": "20",
    "StepBudgetSeconds": "reserve_inventory=10,charge_payment=10,arrange_shipping=10",
    # Each tick reads two entities per order in flight: every 3 s keeps it a fraction of
    # what Azurite serves, and well inside the step budgets.
    "SupervisorSchedule": "*/3 * * * * *",
    "FailureThreshold": "3",
    "RetryBackoffSeconds": "1",
    "RetryBackoffMaxSeconds": "4",
    "PendingGraceSeconds": "10",
    "AgentRetryBaseSeconds": "0.1",
    "AgentRetryMaxSeconds": "1",
    "CircuitBreakerFailures": "8",
    "CircuitBreakerResetSeconds": "3",
}
# How long the summary waits, after the last order settled, for the app to finish with the
# orders: a call to a hung service goes on for up to SimHangSeconds.
METERING_WAIT_SECONDS = 60


@dataclass
class Snapshot:
    total: int
    states: list[dict[str, Any]] = field(default_factory=list)

    @property
    def settled(self) -> list[dict[str, Any]]:
        from shared.adapters.state_store import state_from_entity

        return [s for s in self.states if state_from_entity(s).is_settled]

    def by_state(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for s in self.states:
            label = s["ProcessState"]
            if label == "Error":
                label += f" (compensation {s.get('Compensation') or 'pending'})"
            c[label] += 1
        c["not yet received"] = self.total - len(self.states)
        return c

    def retries(self) -> int:
        return sum(int(s.get("FailureCount", 0)) for s in self.states)

    def step_failures(self) -> Counter[str]:
        return Counter(s.get("FailedStep") or "?" for s in self.states
                       if s["ProcessState"] == "Error")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _progress_table(snap: Snapshot, elapsed: float) -> Table:
    t = Table(title=f"{len(snap.settled)}/{snap.total} orders settled  ({elapsed:.0f}s)",
              show_header=True)
    t.add_column("state")
    t.add_column("orders", justify="right")
    for k, v in sorted(snap.by_state().items()):
        if v:
            t.add_row(k, str(v))
    t.add_row("[dim]retries (timeouts)[/]", str(snap.retries()))
    for step, n in sorted(snap.step_failures().items()):
        t.add_row(f"[dim]failed at {step}[/]", str(n))
    return t


def run_demo(orders: int, port: int, timeout: float, console: Console,
             data: Path = DATA, serve: bool = False, faults: bool = True,
             workflows: list[str] | None = None) -> int:
    from localrun.azurite import Azurite

    log_file = data.parent / "demo.log"

    if not _port_free(port):
        console.print(f"[red]error:[/] port {port} is in use (is `func start` running?); "
                      f"try: make demo PORT=7072")
        return 2
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    # The app's own log goes to a file: the screen is for the progress.
    logging.basicConfig(filename=log_file, filemode="w", level=logging.WARNING, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console.print(f"starting Azurite (data in {data}) ...")
    az = Azurite.start(location=data)
    host = None
    container = None
    stopping = False

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        from azure.data.tables import TableServiceClient
        from azure.storage.queue import QueueServiceClient

        from localrun.appsettings import local_app_settings
        from localrun.host import LocalFunctionHost
        from localrun.metering import StorageMeter, per_order_counts, wait_metered
        from orderctl.samples import sample_orders
        from orderctl.senders import LocalSender
        from shared import bootstrap
        from shared.settings import load_settings

        env = local_app_settings(az.connection_string, port,
                                 **{**DEMO_SETTINGS, **({} if faults else NO_FAULTS)})
        os.environ.update(env)
        import function_app  # it checks the settings on import, as the host would

        meter = StorageMeter()
        settings = load_settings()
        container = bootstrap.build(settings, table_options=meter.table_options,
                                    queue_options=meter.queue_options)
        bootstrap.reset(container)
        container.ensure_resources()
        # Unmetered clients for this screen and the sending, so they don't count as the app's.
        tables = TableServiceClient.from_connection_string(az.connection_string)
        watcher = tables.get_table_client(settings.state_table)
        inflight = tables.get_table_client(settings.inflight_table)
        host = LocalFunctionHost(function_app.app, settings=dict(os.environ),
                                 storage_connection=az.connection_string,
                                 host_json=ROOT / "host.json", http_port=port,
                                 poll_interval=0.2,
                                 queue_options=meter.queue_options).start()
        console.print(f"function app running: http://localhost:{port}/api "
                      f"({len(host.functions)} functions); operator routes take the header "
                      f"x-functions-key: {host.keys.master}")
        console_url = f"http://localhost:{port}/api/console?code={host.keys.function}"
        # soft_wrap: a URL cut across two lines cannot be clicked or copied.
        console.print(f"operator console: {console_url} (resubmit asks for the master key)",
                      soft_wrap=True)
        sender = LocalSender(QueueServiceClient.from_connection_string(az.connection_string),
                             settings.orders_queue)
        batch = list(sample_orders(orders, workflows=workflows))
        # Count and time from the first order (the app starts on it at once), not from after
        # the last one was sent: the app's work, not the demo's set-up.
        meter.reset()
        started = time.monotonic()
        ids = sender.send((o["order_id"], json.dumps(o).encode()) for o in batch)
        console.print(f"sent {len(ids)} orders with faults: "
                      f"{float(env['SimTransientErrorRate']):.0%} transient errors, "
                      f"{float(env['SimPermanentErrorRate']):.0%} refusals, "
                      f"{float(env['SimHangRate']):.0%} hangs")

        def look() -> Snapshot:
            return Snapshot(orders, list(watcher.query_entities("RowKey eq 'state'")))

        snap = look()
        if console.is_terminal:
            with Live(_progress_table(snap, 0), console=console, refresh_per_second=4) as live:
                while len(snap.settled) < orders and time.monotonic() - started < timeout:
                    time.sleep(0.5)
                    snap = look()
                    live.update(_progress_table(snap, time.monotonic() - started))
        else:
            last = 0.0
            while len(snap.settled) < orders and time.monotonic() - started < timeout:
                time.sleep(0.5)
                snap = look()
                if time.monotonic() - last > 2:
                    last = time.monotonic()
                    console.print(f"progress: {len(snap.settled)}/{orders} settled; " + ", ".join(
                        f"{k} {v}" for k, v in sorted(snap.by_state().items()) if v))
        elapsed = time.monotonic() - started
        # The counts, once the app has finished with these orders, not as the last one shows
        # settled: its outbox is still being carried out then.
        unsettled = orders - len(snap.settled)
        metered = not unsettled and wait_metered(
            snap.states, inflight, host, time.monotonic() + METERING_WAIT_SECONDS)
        _summary(console, snap, elapsed, per_order_counts(orders, meter.per_function()))
        result = 0
        if unsettled:
            console.print(f"[red]{unsettled} orders not settled after {timeout:.0f}s[/]")
            result = 1
        elif not metered:
            console.print(f"[yellow]the app was still at work on these orders "
                          f"{METERING_WAIT_SECONDS}s after the last one settled: the counts "
                          "above may be short[/]")
        if serve:
            console.print(f"still serving the operator console: {console_url} "
                          "(Ctrl-C stops everything)", soft_wrap=True)
            with contextlib.suppress(KeyboardInterrupt):  # the way out we offered
                threading.Event().wait()
        stopping = True
        return result
    except KeyboardInterrupt:
        console.print("interrupted: stopping everything ...")
        return 130
    finally:
        if host is not None:
            host.stop()
        if container is not None:
            container.close()
        az.stop()
        if stopping:
            console.print(f"stopped the function app and Azurite; the app's log is in "
                          f"{log_file}")


def _summary(console: Console, snap: Snapshot, elapsed: float, cost: dict[str, Any]) -> None:
    orders = cost["orders"]
    states = snap.states
    processed = sum(s["ProcessState"] == "Processed" for s in states)
    failed = [s for s in states if s["ProcessState"] == "Error"]
    compensated = sum(s.get("Compensation") == "Done" for s in failed)
    retried = sum(int(s.get("FailureCount", 0)) > 0 for s in states)
    t = Table(title="summary (read back from the store and the storage meter)")
    t.add_column("")
    t.add_column("", justify="right")
    for label, value in [
        ("orders", orders),
        ("processed", processed),
        ("failed (Error)", len(failed)),
        ("  of which compensated", compensated),
        ("orders retried after a timeout", retried),
        ("retries in all", snap.retries()),
        *[(f"failed at {k}", v) for k, v in sorted(snap.step_failures().items())],
        ("elapsed", f"{elapsed:.1f}s"),
        ("orders per second", f"{len(snap.settled) / elapsed:.1f}" if elapsed else "-"),
        # As `make bench` counts them: the app's requests, not the simulated services'.
        ("table reads per order", f"{cost['table_reads']:.1f}"),
        ("  of which the Scheduler's", f"{cost['scheduler_table_reads']:.1f}"),
        ("table writes per order", f"{cost['table_writes']:.1f}"),
        ("  of which the Supervisor's", f"{cost['supervisor_table_writes']:.1f}"),
        ("queue messages sent per order", f"{cost['queue_sends']:.1f} (+1 Service Bus)"),
        ("queue receives per order (incl. empty polls)",
         f"{cost['queue_receives'] + cost['queue_empty_polls']:.1f}"),
        ("storage transactions per order", f"{cost['transactions']:.1f}"),
    ]:
        t.add_row(label, str(value))
    console.print(t)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m localrun demo")
    p.add_argument("--orders", type=int, default=100)
    p.add_argument("--port", type=int, default=7071)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--data", type=Path, default=DATA, help="Azurite data folder (wiped first)")
    p.add_argument("--serve", action="store_true",
                   help="after the run, keep the app (and its console) up until Ctrl-C")
    p.add_argument("--no-faults", action="store_true",
                   help="no faults in the simulated services (the figures are then the "
                        "benchmark's fault-free ones)")
    p.add_argument("--workflow", action="append", dest="workflows", metavar="NAME",
                   help="the workflow the orders follow; repeat it for orders to take turns "
                        "(default: the app's default, whose counts the benchmark reports)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from shared.workflows import REGISTRY

    unknown = sorted(set(args.workflows or []) - set(REGISTRY.names))
    if unknown:
        p.error(f"--workflow: no workflow {', '.join(unknown)} (this app runs "
                f"{', '.join(REGISTRY.names)})")
    return run_demo(args.orders, args.port, args.timeout, Console(highlight=False),
                    args.data.resolve(), args.serve, not args.no_faults, args.workflows)
