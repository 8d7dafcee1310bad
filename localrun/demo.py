"""`make demo`: the whole pipeline on this machine, with faults, in one command.

Starts a private Azurite (data in .azurite/demo, wiped first), runs the function app in the
local host (HTTP on http://localhost:7071/api, as `func start` would), sends a batch of orders
through the local orders channel with faults injected, shows progress live, and ends with a
summary read back from the store and the storage meter. Stops everything it started, on
Ctrl-C too, within 5 s: what is still under way then is abandoned, as a stopping host
abandons it. With --serve it stays up after the summary and prints how to point the `orders`
CLI at it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from shared.workflows import REGISTRY

if TYPE_CHECKING:
    from azure.data.tables import TableClient

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".azurite" / "demo"

NO_FAULTS = {"SimTransientErrorRate": "0", "SimPermanentErrorRate": "0", "SimHangRate": "0"}
DEMO_SETTINGS = {
    "SimulatorsEnabled": "true",
    "SimTransientErrorRate": "0.2",
    "SimPermanentErrorRate": "0.03",
    # Hangs are not drawn at random: the demo names the orders that hang (hung_once), so that
    # no order hangs in two steps and every run takes about as long.
    "SimHangRate": "0",
    # A hang outlasts its step's budget (the step is in doubt, and asked again), briefly: the
    # demo's last order settles within seconds of its hung call's timeout.
    "SimHangSeconds": "6",
    "SimLatencyMs": "20",
    # Every registered step, whatever the workflows: short, so the demo's hangs time out soon.
    "StepBudgetSeconds": ",".join(sorted({f"{s.name}=5" for w in REGISTRY.workflows
                                          for s in w.steps})),
    # The operator routes take an identity; locally, the development principal's roles
    # (docs/security-operators.md).
    "OperatorDevelopmentRoles": "Orders.Read,Orders.Resubmit,Orders.Cancel,Orders.Pause",
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
# One order in twenty hangs once, in one of its steps, the services taking turns (about as
# many hangs as 2% of calls drawn at random would give).
HUNG_SHARE = 0.05
# On Ctrl-C, how long the invocations under way may take to finish before they are abandoned:
# with Azurite's stop, everything is down within 5 s.
GRACE_SECONDS = 3.0
# How long the summary waits, after the last order settled, for the app to finish with the
# orders: a call to a hung service goes on for up to SimHangSeconds.
METERING_WAIT_SECONDS = 60


@dataclass
class Snapshot:
    total: int
    states: Sequence[dict[str, Any]] = field(default_factory=list)
    # Orders intake refused (RejectedOrders rows by message id = order id): done, not settled.
    rejected: Sequence[dict[str, Any]] = field(default_factory=list)

    @property
    def done(self) -> int:
        return len(self.settled) + len(self.rejected)

    @property
    def settled(self) -> list[dict[str, Any]]:
        from shared.adapters.state_entity import state_from_entity

        return [s for s in self.states if state_from_entity(s).is_settled]

    def by_state(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for s in self.states:
            label = s["ProcessState"]
            if label == "Error":
                label += f" (compensation {s.get('Compensation') or 'pending'})"
            c[label] += 1
        c["rejected at intake"] = len(self.rejected)
        c["not yet received"] = self.total - len(self.states) - len(self.rejected)
        return c

    def retries(self) -> int:
        return sum(int(s.get("FailureCount", 0)) for s in self.states)

    def step_failures(self) -> Counter[str]:
        return Counter(s.get("FailedStep") or "?" for s in self.states
                       if s["ProcessState"] == "Error")


def _port_free(port: int) -> bool:
    """Whether the local host can listen on ``port``: as it binds (SO_REUSEADDR), so that the
    connections a demo that just ended left in TIME_WAIT do not count, and a listener does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def hung_once(batch: Sequence[dict[str, Any]], share: float) -> list[dict[str, Any]]:
    """The batch, with ``share`` of its orders (at least one when above 0) renamed
    ``sim-hang-<service>-…``: each then hangs once in the step that calls that service, and the
    step's retry finds its work done (simulated_service.HANG_PREFIX). The services of the
    batch's workflows take turns. The orders so named are the first sent whose workflow calls
    the service: their hung calls time out while the rest of the batch is at work, rather than
    after a wait in a queue the whole batch filled (which can cost the same order a timeout of
    its own), so that the last order settles about as late in every run."""
    from shared.handlers.simulated_service import HANG_PREFIX

    orders = [dict(o) for o in batch]
    calls = [[s.service for s in REGISTRY.get(o.get("workflow")).steps] for o in orders]
    services = list(dict.fromkeys(s for called in calls for s in called))
    wanted = min(len(orders), math.ceil(len(orders) * share)) if share > 0 else 0
    for n in range(wanted):
        service = services[n % len(services)]
        at = next((i for i, o in enumerate(orders) if service in calls[i]
                   and not o["order_id"].startswith(HANG_PREFIX)), None)
        if at is not None:
            orders[at]["order_id"] = f"{HANG_PREFIX}{service}-{orders[at]['order_id']}"
    return orders


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
    """Run the demo; returns its exit code (130 after Ctrl-C). Ends the process itself when
    Ctrl-C left invocations running (exit_abandoning): it does not wait for them."""
    from localrun.azurite import Azurite, AzuriteError
    from localrun.host.host import exit_abandoning

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
    # The user's environment, before the app's settings join it: what the `orders` CLI sees.
    user_env = dict(os.environ)

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    # Set here, not inherited: a shell that starts a job in the background ignores SIGINT for
    # it, and Ctrl-C (or a test's SIGINT) must stop the demo however it was started.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    az = None
    host = None
    container = None
    code = 1
    abandoned = 0
    try:
        console.print(f"starting Azurite (data in {data}) ...")
        az = Azurite.start(location=data)
        from azure.data.tables import TableServiceClient
        from azure.storage.queue import QueueServiceClient

        from localrun.appsettings import follow_port, local_app_settings
        from localrun.host.host import LocalFunctionHost
        from localrun.metering import StorageMeter, per_order_counts, wait_metered
        from orderctl.samples import sample_orders
        from orderctl.senders import LocalSender
        from shared import bootstrap
        from shared.adapters.rejections import REJECTED_PARTITION
        from shared.handlers.simulated_service import HANG_PREFIX
        from shared.settings import load_settings

        env = local_app_settings(az.connection_string, port,
                                 **{**DEMO_SETTINGS, **({} if faults else NO_FAULTS)})
        os.environ.update(env)
        # A <Service>ServiceUrl the user's environment sets for another local host is not this
        # run's simulated service.
        follow_port(os.environ, port)
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
        console.print(f"workflows: {container.workflows.describe()}")
        console.print(f"function app running: http://localhost:{port}/api "
                      f"({len(host.functions)} functions); the operator routes act for a local "
                      "development principal (OperatorDevelopmentRoles), no key")
        console_url = f"http://localhost:{port}/api/console"
        # soft_wrap: a URL cut across two lines cannot be clicked or copied.
        console.print(f"operator console: {console_url}", soft_wrap=True)
        # Orders go in once the Supervisor has a tick on record. Before its first tick there is
        # no record that anything could make progress, so it would excuse every timeout of a
        # step begun earlier: the summary would show rescues in place of the real timeouts.
        _wait_first_tick(inflight, settings.supervisor_schedule)
        sender = LocalSender(QueueServiceClient.from_connection_string(az.connection_string),
                             settings.orders_queue)
        batch = hung_once(list(sample_orders(orders, workflows=workflows)),
                          HUNG_SHARE if faults else 0)
        hung = sum(o["order_id"].startswith(HANG_PREFIX) for o in batch)
        # Count and time from the first order (the app starts on it at once), not from after
        # the last one was sent: the app's work, not the demo's set-up.
        meter.reset()
        started = time.monotonic()
        ids = sender.send((o["order_id"], json.dumps(o).encode()) for o in batch)
        console.print(f"sent {len(ids)} orders; the simulated services fault at random: "
                      f"{float(env['SimTransientErrorRate']):.0%} of calls fail transiently, "
                      f"{float(env['SimPermanentErrorRate']):.0%} are refused; {hung} orders "
                      f"named {HANG_PREFIX}<service>-… hang once in that service's step, if "
                      "they get that far")

        rejections = tables.get_table_client(settings.rejected_table)
        sent = set(ids)

        def look() -> Snapshot:
            states = list(watcher.query_entities("RowKey eq 'state'"))
            rejected = [] if len(states) == orders else [
                r for r in rejections.query_entities(
                    "PartitionKey eq @p", parameters={"p": REJECTED_PARTITION},
                    select=["MessageId", "Kind", "Reason"])
                if r.get("MessageId") in sent]
            return Snapshot(orders, states, rejected)

        snap = look()
        if console.is_terminal:
            with Live(_progress_table(snap, 0), console=console, refresh_per_second=4) as live:
                while snap.done < orders and time.monotonic() - started < timeout:
                    time.sleep(0.5)
                    snap = look()
                    live.update(_progress_table(snap, time.monotonic() - started))
        else:
            last = 0.0
            while snap.done < orders and time.monotonic() - started < timeout:
                time.sleep(0.5)
                snap = look()
                if time.monotonic() - last > 2:
                    last = time.monotonic()
                    console.print(f"progress: {len(snap.settled)}/{orders} settled; " + ", ".join(
                        f"{k} {v}" for k, v in sorted(snap.by_state().items()) if v))
        elapsed = time.monotonic() - started
        # The counts, once the app has finished with these orders, not as the last one shows
        # settled: its outbox is still being carried out then.
        unsettled = orders - snap.done
        metered = not unsettled and wait_metered(
            snap.states, inflight, host, time.monotonic() + METERING_WAIT_SECONDS)
        _summary(console, snap, elapsed, per_order_counts(orders, meter.per_function()))
        code = 0
        for r in snap.rejected[:5]:
            console.print("[red]rejected at intake:[/] " + escape(
                f"{r.get('MessageId')}: {r.get('Kind')}: {r.get('Reason')}"), soft_wrap=True)
        if snap.rejected:
            console.print(f"[red]{len(snap.rejected)} orders rejected at intake[/] (their "
                          "reasons: `orders rejected`, or the console)")
            code = 1
        if unsettled:
            console.print(f"[red]{unsettled} orders not settled after {timeout:.0f}s[/]")
            code = 1
        elif not metered:
            console.print(f"[yellow]the app was still at work on these orders "
                          f"{METERING_WAIT_SECONDS}s after the last one settled: the counts "
                          "above may be short[/]")
        if serve:
            console.print(f"still serving the operator console: {console_url} "
                          "(Ctrl-C stops everything)", soft_wrap=True)
            console.print("the orders CLI reaches this run from another shell with:")
            for line in cli_commands(env, user_env):
                console.print(f"  {line}", soft_wrap=True, markup=False)
            with contextlib.suppress(KeyboardInterrupt):  # the way out we offered
                threading.Event().wait()
        return code
    except AzuriteError as e:
        console.print(f"[red]error:[/] {e}")
        code = 2
        return code
    except KeyboardInterrupt:
        _ignore_signals()
        console.print("interrupted: stopping everything ...")
        code = 130
        return code
    finally:
        # Stopping takes a few seconds at most: a second Ctrl-C must not cut it short.
        _ignore_signals()
        if host is not None:
            abandoned = host.stop(grace=GRACE_SECONDS)
        if container is not None:
            container.close()
        if az is not None:
            az.stop()
            console.print(("stopped the function app and Azurite" if host else "stopped Azurite")
                          + (f" ({abandoned} invocations still under way abandoned, as a "
                             "stopping host abandons them)" if abandoned else "")
                          + f"; the app's log is in {log_file}")
        if abandoned:
            exit_abandoning(code)


def _ignore_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def _wait_first_tick(inflight: TableClient, schedule: str) -> None:
    """Until the Supervisor has recorded a completed tick (its first comes within one
    interval), or a few intervals have passed."""
    from shared.adapters.tick_log import TableTickLog
    from shared.settings import schedule_interval

    ticks = TableTickLog(inflight)
    deadline = time.monotonic() + 3 * schedule_interval(schedule) + 5
    while ticks.read()[0].last_tick is None and time.monotonic() < deadline:
        time.sleep(0.1)


def cli_commands(env: Mapping[str, str], user_env: Mapping[str, str]) -> list[str]:
    """Shell lines that point the `orders` CLI at this run: the storage connection, and any
    setting it needs that it would otherwise read differently (from local.settings.json or
    the user's environment, which it reads in that order), then a few commands."""
    seen: dict[str, str] = {}
    settings_file = ROOT / "local.settings.json"
    if settings_file.exists():
        with contextlib.suppress(ValueError, OSError):
            seen.update({k: str(v) for k, v in
                         json.loads(settings_file.read_text()).get("Values", {}).items()})
    seen.update(user_env)
    # Its queues and tables, where unset, are the defaults the demo's template names too.
    names = [k for k in env if k.endswith(("QueueName", "TableName"))
             and seen.get(k, env[k]) != env[k]]
    # Where the services are, and the key the code services' local settings take: the CLI's
    # settings check asks (though it calls none of them).
    names += [k for k in ("SimulatorBaseUrl", "RemoteServiceKey")
              if k in env and seen.get(k) != env[k]]
    lines = [f"export AzureWebJobsStorage={shlex.quote(env['AzureWebJobsStorage'])}"]
    if seen.get("AzureWebJobsStorage__accountName"):
        lines.append("unset AzureWebJobsStorage__accountName")
    lines += [f"export {k}={shlex.quote(env[k])}" for k in sorted(names)]
    orders = _orders_command()
    # Watched as they are sent: an order settled before its watch began is watched a few
    # seconds more, in case it was sent again (orders watch --resend-wait).
    lines += [f"{orders} list", f"{orders} send --local --count 5 | {orders} watch -",
              f"{orders} status ORDER_ID"]
    return lines


def _orders_command() -> str:
    """The `orders` CLI of this environment, as a user would type it."""
    here = Path(sys.executable).parent / "orders"
    found = shutil.which("orders")
    if found and here.exists() and Path(found).resolve() == here.resolve():
        return "orders"
    if here.exists():
        return shlex.quote(str(here))
    return f"{shlex.quote(sys.executable)} -m orderctl"


def _summary(console: Console, snap: Snapshot, elapsed: float, cost: dict[str, Any]) -> None:
    orders = cost["orders"]
    states = snap.states
    processed = sum(s["ProcessState"] == "Processed" for s in states)
    failed = [s for s in states if s["ProcessState"] == "Error"]
    compensated = sum(s.get("Compensation") == "Done" for s in failed)
    retried = sum(int(s.get("FailureCount", 0)) > 0 for s in states)
    t = Table(title="summary (read back from the store and the storage meter)", show_header=False)
    t.add_column("")
    t.add_column("", justify="right")
    for label, value in [
        ("orders", orders),
        *([("rejected at intake", len(snap.rejected))] if snap.rejected else []),
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
    from orderctl.samples import unsampled

    if without := unsampled(args.workflows):
        p.error(f"--workflow: {', '.join(without)} gives no sample orders (its message "
                "model's sample()): the demo sends only sample orders")
    return run_demo(args.orders, args.port, args.timeout, Console(highlight=False),
                    args.data.resolve(), args.serve, not args.no_faults, args.workflows)
