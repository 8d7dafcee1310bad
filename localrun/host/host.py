"""An in-process stand-in for the Azure Functions host, for this machine (no Core Tools here).

It loads ``function_app.app``, reads each function's bindings from ``get_raw_bindings()`` (the JSON
the real host reads) and drives it against Azurite the way the host would:

- queue triggers: base64 messages (``messageEncoding``), ``batchSize`` + ``newBatchThreshold``
  messages in flight, each received for 10 minutes and renewed at half-time while its function
  runs, a failed message made visible again after ``visibilityTimeout``, and moved to
  ``<queue>-poison`` once its dequeue count reaches ``maxDequeueCount`` (all from host.json);
- queue output bindings (``func.Out``), sent by the host after the function returns; as the
  host's shared queue watcher does, each send wakes this host's listener on that queue from its
  back-off (an SDK send from inside a function does not: the host cannot see it);
- timer triggers on six-field NCRONTAB schedules;
- HTTP triggers on ``http://127.0.0.1:<port>/api/<route>``;
- the Service Bus trigger, fed from the local channel (see localrun/servicebus.py),
  ``maxConcurrentCalls`` at once, each message locked for the queue's lock duration and the lock
  renewed while its function runs (up to ``maxAutoLockRenewalDuration``); redelivered at once on
  failure, dead-lettered after ``max_delivery_count``.

Every trigger value is built as the worker builds it, from host-shaped data and trigger metadata
through the library's converters (triggers.py), and every synchronous invocation runs on one
shared thread pool of ``PYTHON_THREADPOOL_THREAD_COUNT`` threads, as in the worker.

``%Name%`` in a binding resolves from the settings, and a missing one is an error, as in the host.

The host in modules: config.py (host.json and the settings it checks), state.py (what is under
way), polling.py and listeners.py (the queue, Service Bus and timer triggers), http.py (the HTTP
triggers and their keys); this one starts and stops them and runs each invocation.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, ThreadPoolExecutor
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn, Protocol

import azure.functions as func
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue import QueueServiceClient, TextBase64EncodePolicy

from localrun.host.config import (
    HostConfigError,
    QueueOptions,
    ServiceBusOptions,
    thread_count,
)
from localrun.host.http import HostKeys, serve_http
from localrun.host.index import IndexedFunction as _Function
from localrun.host.index import functions_of
from localrun.host.listeners import Held, MessageLog, TriggerListeners
from localrun.host.polling import ensure_queue
from localrun.host.state import HostStats, HostStopping, running
from localrun.host.triggers import TriggerData
from shared.adapters.storage import pooled_transport

log = logging.getLogger("localrun.host")
_SETTING = re.compile(r"%([^%]+)%")


class InvocationOutcome(Protocol):
    """How an invocation in a worker process ended (worker.py's Outcome)."""

    @property
    def ok(self) -> bool: ...

    @property
    def cpu_seconds(self) -> float: ...

    @property
    def outputs(self) -> Mapping[str, Any]: ...

    def result(self) -> Any: ...


class Worker(Protocol):
    """What the host asks of the Python worker in a process of its own (worker.py's
    WorkerProcess, which imports this module to run the functions: it is not imported here)."""

    def start(self) -> object: ...

    def stop(self) -> None: ...

    def invoke(self, function: str, trigger: TriggerData) -> InvocationOutcome: ...


class _Out(func.Out):  # type: ignore[type-arg]
    def __init__(self) -> None:
        self._value: Any = None

    def set(self, val: Any) -> None:
        self._value = val

    def get(self) -> Any:
        return self._value


class LocalFunctionHost(TriggerListeners):
    def __init__(self, app: func.FunctionApp, *, settings: Mapping[str, str],
                 storage_connection: str, host_json: Path | Mapping[str, Any],
                 http_port: int | None = None, poll_interval: float | None = None,
                 lease_seconds: float = 600.0, lock_seconds: float = 60.0,
                 max_delivery_count: int = 10, only: set[str] | None = None,
                 queue_options: Mapping[str, Any] | None = None,
                 record_messages: Path | None = None,
                 worker: Worker | None = None) -> None:
        self._settings = settings
        # The Python worker in its own process, as in Azure; without one, in this process.
        self._worker = worker
        # Every message delivered to a function, as a JSON line (the contract tests read it).
        self._record = MessageLog(record_messages) if record_messages else None
        host = (json.loads(Path(host_json).read_text()) if isinstance(host_json, Path)
                else dict(host_json))
        self.queue_options = QueueOptions.from_host_json(host)
        self.service_bus_options = ServiceBusOptions.from_host_json(host)
        self._poll_max = poll_interval or self.queue_options.max_polling_interval
        # The queue listener receives for 10 minutes and renews at half-time while the function
        # runs; Service Bus locks for the queue's lock duration (1 minute in the Bicep) and
        # renews it. A host that dies leaves its messages invisible for that long, no longer.
        self._lease = lease_seconds
        self._lock = lock_seconds
        self._max_delivery = max_delivery_count
        # queue_options reach the SDK client (a metering hook counts the host's polling too).
        # It polls and settles as many messages at once as the app handles: the same pool size.
        self._queues = QueueServiceClient.from_connection_string(
            storage_connection, **{"transport": pooled_transport(), **(queue_options or {})})
        self._http_port = http_port
        self.keys = HostKeys.from_settings(settings)
        self._functions = [f for f in self._index(app) if only is None or f.name in only]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # As in the worker: every synchronous invocation, whatever its trigger, on one pool.
        self.thread_count = thread_count(settings)
        self._pool = ThreadPoolExecutor(max_workers=self.thread_count,
                                        thread_name_prefix="worker")
        self._leases: dict[int, Held] = {}
        self._leases_lock = threading.Lock()
        self._listeners: list[ThreadPoolExecutor] = []
        # The shared queue watcher: each queue listener's wake-up, by queue name.
        self._watchers: dict[str, list[threading.Event]] = {}
        self._watchers_lock = threading.Lock()
        self._http: ThreadingHTTPServer | None = None
        # Set once a stop's grace is over: no invocation starts, HTTP answers 503.
        self._closing = threading.Event()
        self.stats = HostStats()

    # -- index -------------------------------------------------------------------------------

    @staticmethod
    def _index(app: func.FunctionApp) -> list[_Function]:
        functions = functions_of(app)
        for f in functions:
            if sum(b["type"].endswith("Trigger") for b in f.bindings) != 1:
                raise HostConfigError(f"{f.name}: expected exactly one trigger")
        return functions

    def resolve(self, value: str) -> str:
        def sub(m: re.Match[str]) -> str:
            if m.group(1) not in self._settings:
                raise HostConfigError(f"'%{m.group(1)}%' does not resolve to an app setting")
            return self._settings[m.group(1)]

        return _SETTING.sub(sub, value)

    @property
    def functions(self) -> list[str]:
        return [f.name for f in self._functions]

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> LocalFunctionHost:
        # Like the host at start-up: every %Setting% in a binding must resolve, or nothing runs.
        # All of them named at once: a new service brings two (its queue, and its URL's).
        missing = sorted({m.group(1) for f in self._functions for b in f.bindings
                          for v in b.values() if isinstance(v, str)
                          for m in _SETTING.finditer(v) if m.group(1) not in self._settings})
        if missing:
            raise HostConfigError(
                f"{', '.join(f'%{n}%' for n in missing)} "
                f"{'does' if len(missing) == 1 else 'do'} not resolve to an app setting: add "
                f"{'it' if len(missing) == 1 else 'them'} to local.settings.json "
                "(local.settings.template.json has the values; `python -m shared.contracts` "
                "writes a new service's there)")
        if self._worker is not None:
            self._worker.start()
        http_routes = []
        for f in self._functions:
            kind = f.trigger["type"]
            if kind == "queueTrigger":
                self._spawn(f.name, self._queue_loop, f)
            elif kind == "serviceBusTrigger":
                self._spawn(f.name, self._service_bus_loop, f)
            elif kind == "timerTrigger":
                self._spawn(f.name, self._timer_loop, f)
            elif kind == "httpTrigger":
                http_routes.append(f)
            else:
                raise HostConfigError(f"{f.name}: trigger {kind} is not supported locally")
        if http_routes and self._http_port is not None:
            self._http = serve_http(self, http_routes, self._http_port)
            self._spawn("http", lambda _: self._http.serve_forever(0.2), None)  # type: ignore[union-attr]
        self._spawn("leases", lambda _: self._renew_leases(), None)
        return self

    def _spawn(self, name: str, target: Callable[[Any], None], arg: Any) -> None:
        def guarded(arg: Any) -> None:
            try:
                target(arg)
            except Exception:
                log.critical("the %s listener stopped", name, exc_info=True)
                self.stats.listener_failures.append(name)
                raise

        t = threading.Thread(target=guarded, args=(arg,), name=f"host-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self, grace: float | None = None) -> int:
        """Stop as the host does when it shuts down: no message is received and no timer fires
        from now on; the invocations under way (HTTP ones too, served meanwhile) may finish,
        for up to ``grace`` seconds (None: however long they take). Then HTTP closes (a request
        still arriving is answered 503) and whatever still runs is abandoned: its message is
        neither deleted nor released, so it comes back when its lease or lock runs out, as
        after any host that stops. Returns how many invocations were abandoned; their threads
        hold the process until they end, so whoever exits then calls exit_abandoning."""
        self._stop.set()
        with self._watchers_lock:
            for wakes in self._watchers.values():
                for wake in wakes:
                    wake.set()
        if grace is None:
            self._stop_waiting()
            return 0
        self.stats.wait_idle(grace)
        self._closing.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        # The listeners' loops end at their next wake-up; a timer's thread may be in an
        # abandoned invocation, so none is waited for long.
        deadline = time.monotonic() + 1.0
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        for listener in self._listeners:
            listener.shutdown(wait=False, cancel_futures=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        abandoned = self.stats.invoking
        if self._worker is not None:
            self._worker.stop()
        if abandoned:
            log.warning("stopped with %d invocation(s) still running, abandoned: their "
                        "messages come back when their leases run out", abandoned)
        return abandoned

    def _stop_waiting(self) -> None:
        # Every invocation under way finishes first (tests and the bench count its requests).
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        for t in self._threads:
            t.join(timeout=10)
        for listener in self._listeners:
            listener.shutdown(wait=True, cancel_futures=True)
        self._closing.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._worker is not None:
            self._worker.stop()

    @property
    def closing(self) -> bool:
        """The host no longer starts invocations (a stop's grace is over)."""
        return self._closing.is_set()

    def __enter__(self) -> LocalFunctionHost:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def idle(self) -> bool:
        """No invocation under way and no message held: all the work begun so far is done."""
        return self.stats.busy == 0

    @property
    def http_port(self) -> int | None:
        return self._http.server_address[1] if self._http else None

    # -- invocation --------------------------------------------------------------------------

    def run(self, f: _Function, trigger: TriggerData) -> Any:
        """Invoke and wait, as the worker runs a synchronous function: on the shared pool of
        this process, or, with a worker process, on that process's (worker.py). Then, as the
        host does with the worker's answer, send what it set on its output bindings: if that
        fails, the invocation has failed."""
        if self._closing.is_set():
            raise HostStopping(f"the host is stopping: {f.name} not run")
        with self.stats.working(invocation=True):
            if self._worker is not None:
                outcome = self._worker.invoke(f.name, trigger)
                self.stats.count(f.name, ok=outcome.ok, cpu=outcome.cpu_seconds)
                result, outputs = outcome.result(), outcome.outputs
            else:
                try:
                    future = self._pool.submit(self.call, f, trigger.build())
                    result, outputs = future.result()
                except (RuntimeError, CancelledError):
                    # The pool shut down before it started the invocation: the host stopped.
                    if not self._closing.is_set():
                        raise
                    raise HostStopping(f"the host is stopping: {f.name} not run") from None
            self.send_outputs(f, outputs)
            return result

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` on the shared pool (a worker process's invocations, worker.py)."""
        self._pool.submit(fn, *args)

    def call(self, f: _Function, trigger_value: Any) -> tuple[Any, dict[str, Any]]:
        """Run the function on this thread: its return value, and the value it set on each
        queue output binding (by the binding's name), for the host to send."""
        outs = {b["name"]: _Out() for b in f.outputs if b["name"] != "$return"}
        with running(f.name):
            started = time.thread_time()
            try:
                result = f.call(**{f.trigger["name"]: trigger_value}, **outs)
                if result is not None and not any(b["name"] == "$return" for b in f.outputs):
                    # The worker fails such an invocation: nothing could receive the value.
                    raise TypeError(
                        f"function {f.name} returned a value but has no return binding")
            except Exception:
                self.stats.count(f.name, ok=False, cpu=time.thread_time() - started)
                log.exception("function %s failed", f.name)
                raise
        self.stats.count(f.name, ok=True, cpu=time.thread_time() - started)
        return result, {name: out.get() for name, out in outs.items() if out.get() is not None}

    def send_outputs(self, f: _Function, outputs: Mapping[str, Any]) -> None:
        """Send each queue output binding's value, then wake this host's listener on that queue
        (the shared queue watcher). The sends are the function's requests, as on the bill."""
        with running(f.name):
            try:
                for b in f.outputs:
                    if b["type"] == "queue" and b["name"] in outputs:
                        queue = self.resolve(b["queueName"])
                        self._send_output(queue, outputs[b["name"]])
                        self._notify(queue)
            except Exception:
                self.stats.outputs_failed(f.name)
                log.exception("function %s: its output bindings could not be sent", f.name)
                raise

    def _send_output(self, queue: str, value: Any) -> None:
        q = self._queues.get_queue_client(
            queue,
            message_encode_policy=TextBase64EncodePolicy() if self.queue_options.base64 else None,
        )
        for item in value if isinstance(value, list) else [value]:
            body = item if isinstance(item, str) else json.dumps(item)
            try:
                q.send_message(body)
            except ResourceNotFoundError:  # as the host's binding: create the queue, send again
                ensure_queue(q)
                q.send_message(body)


def exit_abandoning(code: int) -> NoReturn:
    """End this process at once, though invocations a stop abandoned still run on its threads
    (the interpreter would wait for them at exit; a host that stops does not). What it printed,
    logged and traced is flushed first."""
    with contextlib.suppress(Exception):
        from opentelemetry import trace

        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is not None:
            flush(2000)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
