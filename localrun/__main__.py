"""Run the function app locally: ``python -m localrun host``.

App settings come from the environment, then from local.settings.json's Values (as Core Tools
does). The simulated services it serves are reached on the port it serves them on, whatever the
settings say (appsettings.follow_port). On Ctrl-C or SIGTERM it stops as the host does: the
invocations under way get a few seconds to finish, the rest are abandoned; it prints what it ran
as JSON.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Ctrl-C to exit within 5 s: 3 for the work under way, the rest to close and flush.
GRACE_SECONDS = 3.0


def _load_local_settings(path: Path) -> None:
    if path.exists():
        for k, v in json.loads(path.read_text()).get("Values", {}).items():
            os.environ.setdefault(k, str(v))


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    from shared.domain.declarations import DeclarationError

    try:
        return _run(argv)
    except DeclarationError as e:  # found as the workflows are imported: said, no traceback
        print(f"error: {e.for_a_person()}", file=sys.stderr)
        return 2


def _run(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["demo"]:
        from localrun.demo import main as demo

        return demo(argv[1:])
    if argv[:1] == ["bench"]:
        from localrun.bench.bench import main as bench

        return bench(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m localrun")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="the whole pipeline with faults, one command (make demo)")
    sub.add_parser("bench", help="transactions, throughput, latency, supervisor cost (make bench)")
    host = sub.add_parser("host", help="run the function app against Azurite")
    host.add_argument("--port", type=int, default=7071,
                      help="HTTP port (default 7071; 0: any free one); the simulated services' "
                           "URLs follow it")
    host.add_argument("--poll-interval", type=float, default=None,
                      help="longest queue polling interval in seconds (default: host.json)")
    host.add_argument("--settings", type=Path, default=ROOT / "local.settings.json")
    host.add_argument("--create-resources", action="store_true",
                      help="create the app's tables and queues first")
    host.add_argument("--lease-seconds", type=float, default=600.0,
                      help="how long a received Storage-queue message stays invisible to other "
                           "hosts; renewed at half-time while its function runs (default 600, "
                           "as the host)")
    host.add_argument("--lock-seconds", type=float, default=60.0,
                      help="the Service Bus stand-in's message lock, renewed the same way "
                           "(default 60, the orders queue's lockDuration)")
    host.add_argument("--grace-seconds", type=float, default=GRACE_SECONDS,
                      help="on Ctrl-C, how long the invocations under way may take to finish "
                           "before they are abandoned (their messages come back when their "
                           f"leases run out; default {GRACE_SECONDS:g})")
    host.add_argument("--record-messages", type=Path, default=None, metavar="FILE",
                      help="append every message delivered to a function to FILE as JSON "
                           "lines (queue, function, body): for contract tests and debugging")
    args = parser.parse_args(argv)

    logging.basicConfig(level=os.environ.get("LOCALRUN_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _load_local_settings(args.settings)
    sys.path.insert(0, str(ROOT))
    from localrun.appsettings import follow_port
    from localrun.azurite import free_port
    from localrun.host.config import HostConfigError, init_worker_telemetry
    from localrun.host.host import LocalFunctionHost, exit_abandoning
    from shared.settings import SettingsError

    # Set here, not inherited: a shell that starts a job in the background ignores SIGINT for
    # it, and Ctrl-C (or a test's SIGINT) must stop the host however it was started.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    # The port is settled before the app reads its settings: they name it.
    port = args.port or free_port()
    for key, (was, now) in follow_port(os.environ, port).items():
        print(f"note: {key} is {now} (the simulated services this host serves are on "
              f"port {port}; the settings said {was})", file=sys.stderr)

    try:
        init_worker_telemetry(os.environ)
        import function_app  # checks the settings, as the host does when it indexes the app
        from shared import bootstrap
        from shared.contracts.services import thread_pool

        # A pool sized for fewer services than the app now runs (a local.settings.json made
        # before one was added) leaves invocations waiting for a thread: said, not refused.
        needed = thread_pool(bootstrap.configured(), json.loads((ROOT / "host.json").read_text()))
        pool = os.environ.get("PYTHON_THREADPOOL_THREAD_COUNT", "")
        if pool.isdigit() and int(pool) < needed:
            print(f"note: PYTHON_THREADPOOL_THREAD_COUNT is {pool}, fewer than the {needed} the "
                  "app's functions may run at once (local.settings.template.json has it)",
                  file=sys.stderr)

        config = function_app.config  # the settings as the app resolved them at import
        settings = config.settings
        if args.create_resources:
            bootstrap.container().ensure_resources()
        runner = LocalFunctionHost(
            function_app.app, settings=dict(os.environ),
            storage_connection=settings.effective_storage_connection or "",
            host_json=ROOT / "host.json", http_port=port, poll_interval=args.poll_interval,
            lease_seconds=args.lease_seconds, lock_seconds=args.lock_seconds,
            record_messages=args.record_messages)
    except (SettingsError, HostConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        runner.start()
    except HostConfigError as e:
        runner.stop()
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the HTTP port
        runner.stop()
        print(f"error: cannot serve HTTP on port {port}: {e.strerror or e} "
              "(another host running? choose one with --port)", file=sys.stderr)
        return 2
    # `kill -USR1 <pid>`: every thread's stack to stderr, to see what a busy or stuck host does.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # As the host, HTTP routes check keys by auth level: pass one as x-functions-key or ?code=.
    print(json.dumps({"event": "started", "functions": runner.functions,
                      "http": f"http://127.0.0.1:{runner.http_port}/api",
                      "simulators": settings.simulator_base_url if settings.simulators_enabled
                      else None,
                      # What `func start` logs at start-up: each workflow and the versions kept.
                      "workflows": config.workflows.describe(),
                      "keys": {"function": runner.keys.function, "master": runner.keys.master}}),
          flush=True)
    stop.wait()
    abandoned = runner.stop(grace=args.grace_seconds)
    s = runner.stats
    print(json.dumps({"event": "stopped", "invocations": s.invocations, "failures": s.failures,
                      "poisoned": s.poisoned, "dead_lettered": s.dead_lettered,
                      "abandoned": abandoned}), flush=True)
    if abandoned:
        exit_abandoning(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
