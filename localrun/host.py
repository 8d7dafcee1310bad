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
- the Service Bus trigger, fed from the local channel (see servicebus.py), ``maxConcurrentCalls``
  at once, each message locked for the queue's lock duration and the lock renewed while its
  function runs (up to ``maxAutoLockRenewalDuration``); redelivered at once on failure,
  dead-lettered after ``max_delivery_count``.

Every trigger value is built as the worker builds it, from host-shaped data and trigger metadata
through the library's converters (triggers.py), and every synchronous invocation runs on one
shared thread pool of ``PYTHON_THREADPOOL_THREAD_COUNT`` threads, as in the worker.

``%Name%`` in a binding resolves from the settings, and a missing one is an error, as in the host.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import json
import logging
import os
import random
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import CancelledError, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import parse_qs, unquote, urlsplit

import azure.functions as func
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.queue import QueueClient, QueueServiceClient, TextBase64EncodePolicy
from croniter import croniter

from localrun import triggers
from localrun.index import IndexedFunction as _Function
from localrun.index import functions_of
from localrun.servicebus import LocalServiceBusChannel, ServiceBusEnvelope
from localrun.triggers import TriggerData
from shared.adapters.storage import pooled_transport

if TYPE_CHECKING:
    from localrun.worker import WorkerProcess

log = logging.getLogger("localrun.host")
_SETTING = re.compile(r"%([^%]+)%")


_current = threading.local()


def current_function() -> str | None:
    """The function this thread is running for the local host, if any (for metering)."""
    return getattr(_current, "function", None)


class HostConfigError(RuntimeError):
    pass


class HostStopping(RuntimeError):
    """An invocation asked for once the host had stopped taking work: it never runs."""


def _timespan(value: str) -> float:
    h, m, s = value.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


@dataclass(frozen=True)
class QueueOptions:
    max_polling_interval: float = 60.0
    visibility_timeout: float = 0.0
    batch_size: int = 16
    new_batch_threshold: int = 8
    max_dequeue_count: int = 5
    base64: bool = True

    @classmethod
    def from_host_json(cls, host: Mapping[str, Any]) -> QueueOptions:
        q = host.get("extensions", {}).get("queues", {})
        return cls(
            max_polling_interval=_timespan(q.get("maxPollingInterval", "00:01:00")),
            visibility_timeout=_timespan(q.get("visibilityTimeout", "00:00:00")),
            batch_size=int(q.get("batchSize", 16)),
            new_batch_threshold=int(q.get("newBatchThreshold", 8)),
            max_dequeue_count=int(q.get("maxDequeueCount", 5)),
            base64=q.get("messageEncoding", "base64") == "base64",
        )


@dataclass(frozen=True)
class ServiceBusOptions:
    max_concurrent_calls: int = 16
    max_auto_lock_renewal: float = 300.0

    @classmethod
    def from_host_json(cls, host: Mapping[str, Any]) -> ServiceBusOptions:
        sb = host.get("extensions", {}).get("serviceBus", {})
        return cls(max_concurrent_calls=int(sb.get("maxConcurrentCalls", 16)),
                   max_auto_lock_renewal=_timespan(sb.get("maxAutoLockRenewalDuration",
                                                          "00:05:00")))


# The host's default when PYTHON_THREADPOOL_THREAD_COUNT is not set (the worker on its own would
# take min(32, CPUs + 4)).
HOST_DEFAULT_THREAD_COUNT = 1000


def thread_count(settings: Mapping[str, str]) -> int:
    raw = settings.get("PYTHON_THREADPOOL_THREAD_COUNT")
    if raw is None or raw == "":
        return HOST_DEFAULT_THREAD_COUNT
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= 32767:
        raise HostConfigError(
            f"PYTHON_THREADPOOL_THREAD_COUNT={raw!r} must be a whole number from 1 to 32767")
    return n


def init_worker_telemetry(settings: Mapping[str, str]) -> bool:
    """What the Python worker does at its init request, before it imports the app, when
    PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY is true: set up the Azure Monitor distro with
    only the connection string and logger name (everything else from the environment, such as
    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS), and tell the host so that it stops forwarding the
    app's log records itself. Returns whether it did."""
    if settings.get("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY", "").lower() != "true":
        return False
    from azure.monitor.opentelemetry import configure_azure_monitor

    os.environ.setdefault("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "azure_functions")
    try:
        configure_azure_monitor(
            connection_string=settings.get("APPLICATIONINSIGHTS_CONNECTION_STRING"),
            logger_name=settings.get("PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME", ""))
    except Exception:  # the worker logs it and goes on without
        logging.getLogger(__name__).exception("Error initializing Azure monitor distro")
        return False
    return True


@dataclass(frozen=True)
class HostKeys:
    """The keys the HTTP routes check: a function key (``function`` level) and the master key.

    In Azure the host keeps them in its secret store; here they come from the settings
    ``LOCALRUN_FUNCTION_KEY`` and ``LOCALRUN_MASTER_KEY``, or are made up at start-up.
    """

    function: str
    master: str

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> HostKeys:
        return cls(settings.get("LOCALRUN_FUNCTION_KEY") or secrets.token_urlsafe(32),
                   settings.get("LOCALRUN_MASTER_KEY") or secrets.token_urlsafe(32))

    def allow(self, level: str, presented: str | None) -> bool:
        """As the host: anonymous needs nothing, function a function or the master key, admin
        the master key."""
        level = level.upper()
        if level == "ANONYMOUS":
            return True
        if not presented:
            return False
        # Compared as bytes: compare_digest refuses a str with a non-ASCII character (a header
        # is read as Latin-1, a ?code= as UTF-8), and a malformed key is a wrong key, a 401.
        given = presented.encode("utf-8", "surrogatepass")
        master = hmac.compare_digest(given, self.master.encode("utf-8", "surrogatepass"))
        if level == "ADMIN":
            return master
        return master or hmac.compare_digest(given,
                                             self.function.encode("utf-8", "surrogatepass"))


@dataclass
class _Held:
    """A received message this host is working on, and the lease it keeps renewing."""

    queue: QueueClient
    message: Any
    lease: float
    renew_until: float
    next_renewal: float
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class HostStats:
    invocations: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    # CPU seconds of the invoking thread, by function: what each function's code (and the SDK
    # calls it makes) costs this process, apart from the host's side of its messages.
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    poisoned: int = 0
    dead_lettered: int = 0
    listener_failures: list[str] = field(default_factory=list)
    # Invocations under way and messages not yet settled: whoever counts the app's requests
    # (the demo, the bench) waits for 0, when every request the work made has been metered.
    busy: int = 0
    # Of those, the invocations under way (what a stop abandons if they outlast its grace).
    invoking: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _idle: threading.Condition = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._idle = threading.Condition(self._lock)

    @contextlib.contextmanager
    def working(self, invocation: bool = False) -> Iterator[None]:
        with self._lock:
            self.busy += 1
            self.invoking += invocation
        try:
            yield
        finally:
            with self._lock:
                self.busy -= 1
                self.invoking -= invocation
                if self.busy == 0:
                    self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for nothing to be under way; whether it came to that."""
        with self._idle:
            return self._idle.wait_for(lambda: self.busy == 0, timeout)

    def count(self, name: str, ok: bool, cpu: float = 0.0) -> None:
        with self._lock:
            self.invocations[name] = self.invocations.get(name, 0) + 1
            self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + cpu
            if not ok:
                self.failures[name] = self.failures.get(name, 0) + 1

    def outputs_failed(self, name: str) -> None:
        """An invocation counted as returned whose outputs could not be sent: it failed."""
        with self._lock:
            self.failures[name] = self.failures.get(name, 0) + 1


class _Out(func.Out):  # type: ignore[type-arg]
    def __init__(self) -> None:
        self._value: Any = None

    def set(self, val: Any) -> None:
        self._value = val

    def get(self) -> Any:
        return self._value


class _MessageLog:
    """Appends {"queue", "function", "body"} lines; one write per line, so lines stay whole
    between threads (a killed process may leave its last line cut short)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, queue: str, function: str, body: bytes) -> None:
        line = json.dumps({"queue": queue, "function": function,
                           "body": body.decode("utf-8", errors="replace")})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


def queue_batches(batch_size: int, new_batch_threshold: int) -> Callable[[int], int]:
    """The queue listener's rule: ask for ``batchSize`` messages, and ask again only once the
    invocations in flight are down to ``newBatchThreshold`` (so at most the sum run at once)."""
    return lambda in_flight: batch_size if in_flight <= new_batch_threshold else 0


def up_to(max_concurrent_calls: int) -> Callable[[int], int]:
    """The Service Bus message pump's: as many as ``maxConcurrentCalls`` leaves room for (a
    Storage queue, the local channel, gives at most 32 a request)."""
    return lambda in_flight: min(32, max_concurrent_calls - in_flight)


# The queue listener's shortest wait after an empty poll (QueuePollingIntervals.Minimum).
MIN_POLLING_INTERVAL = 0.1
# The Service Bus trigger's receiver holds an AMQP link open and the broker pushes each message as
# it arrives: no polling interval. The stand-in, a Storage queue, comes closest by asking at a
# short fixed interval, idle or not. Its requests are not storage transactions (the meter keeps
# them apart); they cost this machine about 20 requests a second to Azurite while idle.
SERVICE_BUS_POLL_SECONDS = 0.05


class ListenerBackoff:
    """How long the queue listener waits after a poll that found nothing (its randomised
    exponential back-off): the minimum if messages came since the last wait, then the minimum
    plus 1, 2, 4... times it, each ±20% at random, until that reaches ``maximum``
    (``maxPollingInterval``), which it then keeps."""

    JITTER = 0.2

    def __init__(self, maximum: float, minimum: float = MIN_POLLING_INTERVAL,
                 uniform: Callable[[float, float], float] = random.uniform) -> None:
        # The host refuses a minimum above the maximum; a test's short maximum lowers both.
        self.minimum, self.maximum = min(minimum, maximum), maximum
        self._uniform = uniform
        self._current = 0.0
        self._exponent = 0

    def next_delay(self, found_since_last: bool) -> float:
        if found_since_last:
            self._current, self._exponent = self.minimum, 1
        elif self._current != self.maximum:
            interval = self.minimum
            if self._exponent > 0:
                interval += (self._uniform(1 - self.JITTER, 1 + self.JITTER)
                             * 2 ** (self._exponent - 1) * self.minimum)
            if interval < self.maximum:
                self._current, self._exponent = interval, self._exponent + 1
            else:
                self._current = self.maximum
        return self._current


def poll_loop(receive: Callable[[int], list[Any]], handle: Callable[[Any], None],
              ask: Callable[[int], int], *, listener: ThreadPoolExecutor,
              stop: threading.Event, max_delay: float,
              wake: threading.Event | None = None) -> None:
    """A listener's polling loop: one receive request when ``ask`` allows one, each message
    handled on ``listener``; after an empty receive, wait as the listener does
    (ListenerBackoff, up to ``max_delay``), or until ``wake`` is set (the shared queue
    watcher's notice). A notice that comes while a receive is under way ends the wait that
    follows it, as the listener's does; its owner sets ``wake`` when it sets ``stop``."""
    room = threading.Condition()
    in_flight = 0
    backoff = ListenerBackoff(max_delay, minimum=MIN_POLLING_INTERVAL)
    found = False
    wait = (wake or stop).wait

    def run(m: Any) -> None:
        nonlocal in_flight
        try:
            handle(m)
        finally:
            with room:
                in_flight -= 1
                room.notify()

    while not stop.is_set():
        with room:
            n = ask(in_flight)
            if n <= 0:
                room.wait(timeout=0.2)
                continue
        if wake is not None:
            wake.clear()
        try:
            messages = receive(n)
        except Exception:
            log.exception("receive failed")
            messages = []
        if not messages:
            wait(backoff.next_delay(found))
            found = False
            continue
        found = True
        with room:
            in_flight += len(messages)
        for m in messages:
            listener.submit(run, m)


class LocalFunctionHost:
    def __init__(self, app: func.FunctionApp, *, settings: Mapping[str, str],
                 storage_connection: str, host_json: Path | Mapping[str, Any],
                 http_port: int | None = None, poll_interval: float | None = None,
                 lease_seconds: float = 600.0, lock_seconds: float = 60.0,
                 max_delivery_count: int = 10, only: set[str] | None = None,
                 queue_options: Mapping[str, Any] | None = None,
                 record_messages: Path | None = None,
                 worker: WorkerProcess | None = None) -> None:
        self._settings = settings
        # The Python worker in its own process, as in Azure; without one, in this process.
        self._worker = worker
        # Every message delivered to a function, as a JSON line (the contract tests read it).
        self._record = _MessageLog(record_messages) if record_messages else None
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
        self._leases: dict[int, _Held] = {}
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
            self._http = _serve_http(self, http_routes, self._http_port)
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
        _current.function = f.name
        started = time.thread_time()
        try:
            result = f.call(**{f.trigger["name"]: trigger_value}, **outs)
            if result is not None and not any(b["name"] == "$return" for b in f.outputs):
                # The worker fails such an invocation: nothing could receive the value.
                raise TypeError(f"function {f.name} returned a value but has no return binding")
        except Exception:
            self.stats.count(f.name, ok=False, cpu=time.thread_time() - started)
            log.exception("function %s failed", f.name)
            raise
        finally:
            _current.function = None
        self.stats.count(f.name, ok=True, cpu=time.thread_time() - started)
        return result, {name: out.get() for name, out in outs.items() if out.get() is not None}

    def send_outputs(self, f: _Function, outputs: Mapping[str, Any]) -> None:
        """Send each queue output binding's value, then wake this host's listener on that queue
        (the shared queue watcher). The sends are the function's requests, as on the bill."""
        _current.function = f.name
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
        finally:
            _current.function = None

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
                _ensure(q)
                q.send_message(body)

    def _watch(self, queue: str) -> threading.Event:
        wake = threading.Event()
        with self._watchers_lock:
            self._watchers.setdefault(queue, []).append(wake)
            if self._stop.is_set():
                wake.set()
        return wake

    def _notify(self, queue: str) -> None:
        with self._watchers_lock:
            wakes = list(self._watchers.get(queue, ()))
        for wake in wakes:
            wake.set()

    # -- queue trigger -----------------------------------------------------------------------

    def _poll(self, receive: Callable[[int], list[Any]], handle: Callable[[Any], None],
              ask: Callable[[int], int], workers: int, max_delay: float | None = None,
              wake: threading.Event | None = None) -> None:
        # The host's side of each message (receive, renew, settle) is its own; only the
        # invocation itself takes a thread of the worker's shared pool (run()).
        listener = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="listener")
        self._listeners.append(listener)

        def handled(m: Any) -> None:  # the message's whole handling, its settle included
            with self.stats.working():
                handle(m)

        poll_loop(receive, handled, ask, listener=listener, stop=self._stop,
                  max_delay=max_delay or self._poll_max, wake=wake)

    # -- leases ------------------------------------------------------------------------------

    def _hold(self, queue: QueueClient, m: Any, lease: float, renew_for: float) -> _Held:
        now = time.monotonic()
        held = _Held(queue, m, lease, renew_until=now + renew_for, next_renewal=now + lease / 2)
        with self._leases_lock:
            self._leases[id(held)] = held
        return held

    def _settle(self, held: _Held, visible_after: float | None) -> None:
        """Delete the message (``None``) or make it visible again after so many seconds."""
        with self._leases_lock:
            self._leases.pop(id(held), None)
        with held.lock:
            if visible_after is None:
                held.queue.delete_message(held.message)
            else:
                held.queue.update_message(held.message, visibility_timeout=int(visible_after))

    def _abandon(self, held: _Held) -> None:
        """Leave the message as it is: it comes back when its lease runs out (a host that stops
        before it runs a message it received does not settle it either)."""
        with self._leases_lock:
            self._leases.pop(id(held), None)

    def _renew_leases(self) -> None:
        # The host's renewal timer: at half the lease, extend it by a whole lease, for as long as
        # the function runs (Service Bus: up to maxAutoLockRenewalDuration).
        while not self._stop.wait(0.5):
            now = time.monotonic()
            with self._leases_lock:
                due = [h for h in self._leases.values()
                       if h.next_renewal <= now < h.renew_until]
            for h in due:
                with h.lock:
                    if id(h) not in self._leases:
                        continue
                    try:
                        r = h.queue.update_message(h.message, visibility_timeout=int(h.lease))
                    except Exception:
                        log.warning("could not renew the lease on message %s", h.message.id,
                                    exc_info=True)
                        continue
                    h.message.pop_receipt = r.pop_receipt
                    h.message.next_visible_on = r.next_visible_on
                    h.next_renewal = time.monotonic() + h.lease / 2

    # -- queue trigger -----------------------------------------------------------------------

    def _queue_loop(self, f: _Function) -> None:
        opts = self.queue_options
        queue = self._queues.get_queue_client(self.resolve(f.trigger["queueName"]))
        poison = self._queues.get_queue_client(queue.queue_name + "-poison")
        _ensure(queue)

        receive = receiver(queue, self._lease)

        def handle(m: Any) -> None:
            held = self._hold(queue, m, self._lease, renew_for=float("inf"))
            try:
                body = base64.b64decode(m.content, validate=True) if opts.base64 \
                    else m.content.encode()
            except (binascii.Error, ValueError):
                body = None
            try:
                if body is None:
                    raise ValueError("message is not valid base64 (host messageEncoding)")
                if self._record:
                    self._record.write(queue.queue_name, f.name, body)
                self.run(f, TriggerData(triggers.queue_message, dict(
                    function=f.name, body=body, id=m.id, dequeue_count=m.dequeue_count,
                    inserted_on=m.inserted_on, expires_on=m.expires_on,
                    next_visible_on=m.next_visible_on, pop_receipt=m.pop_receipt)))
            except HostStopping:
                self._abandon(held)
                return
            except Exception:
                if m.dequeue_count >= opts.max_dequeue_count:
                    _ensure(poison)
                    poison.send_message(m.content)
                    self._settle(held, None)
                    with self.stats._lock:
                        self.stats.poisoned += 1
                    log.error("%s: message %s moved to %s", f.name, m.id, poison.queue_name)
                else:
                    self._settle(held, opts.visibility_timeout)
                return
            self._settle(held, None)

        self._poll(receive, handle, queue_batches(opts.batch_size, opts.new_batch_threshold),
                   opts.batch_size + opts.new_batch_threshold, wake=self._watch(queue.queue_name))

    # -- Service Bus trigger -----------------------------------------------------------------

    def _service_bus_loop(self, f: _Function) -> None:
        channel = LocalServiceBusChannel(self._queues, self.resolve(f.trigger["queueName"]))
        channel.ensure()
        queue = channel.queue
        opts = self.service_bus_options

        receive = receiver(queue, self._lock)

        def handle(m: Any) -> None:
            held = self._hold(queue, m, self._lock, renew_for=opts.max_auto_lock_renewal)
            try:
                env = ServiceBusEnvelope.parse(m.content)
                if self._record:
                    self._record.write(channel.orders_queue, f.name, env.body)
                self.run(f, TriggerData(triggers.service_bus_message, dict(
                    function=f.name, body=env.body, message_id=env.message_id,
                    content_type=env.content_type,
                    application_properties=env.application_properties,
                    delivery_count=m.dequeue_count, sequence_number=env.sequence_number,
                    enqueued=env.enqueued_time_utc, time_to_live=env.time_to_live,
                    lock_token=m.pop_receipt,
                    locked_until=datetime.now(UTC) + timedelta(seconds=self._lock))))
            except HostStopping:
                self._abandon(held)
                return
            except Exception:
                if m.dequeue_count >= self._max_delivery:
                    envelope = json.loads(m.content)
                    envelope["dead_letter_reason"] = "MaxDeliveryCountExceeded"
                    channel.deadletter.send_message(json.dumps(envelope))
                    self._settle(held, None)
                    with self.stats._lock:
                        self.stats.dead_lettered += 1
                else:
                    # Service Bus redelivers an abandoned message at once.
                    self._settle(held, 0)
                return
            self._settle(held, None)

        self._poll(receive, handle, up_to(opts.max_concurrent_calls),
                   opts.max_concurrent_calls,
                   max_delay=min(self._poll_max, SERVICE_BUS_POLL_SECONDS))

    # -- timer trigger -----------------------------------------------------------------------

    def _timer_loop(self, f: _Function) -> None:
        schedule = self.resolve(f.trigger["schedule"])
        if len(schedule.split()) != 6:
            raise HostConfigError(f"{f.name}: schedule {schedule!r} is not six-field NCRONTAB")
        it = croniter(schedule, datetime.now(UTC), second_at_beginning=True)
        last: datetime | None = None
        while not self._stop.is_set():
            due: datetime = it.get_next(datetime)
            wait = (due - datetime.now(UTC)).total_seconds()
            if wait > 0 and self._stop.wait(wait):
                return
            past_due = (datetime.now(UTC) - due) > timedelta(seconds=5)
            request = TriggerData(triggers.timer_request, dict(
                past_due=past_due, last=last,
                next=croniter(schedule, due, second_at_beginning=True).get_next(datetime)))
            # A failed run is logged (call()); like the host, wait for the next occurrence.
            with contextlib.suppress(Exception):
                self.run(f, request)
            last = due


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


def receiver(queue: QueueClient, lease: float) -> Callable[[int], list[Any]]:
    """One Get Messages request for up to n messages, each invisible to other hosts for
    ``lease`` seconds. (The SDK's pager, asked for n, would ask again after a short page: an
    empty request per poll that the host does not make.)"""

    def receive(n: int) -> list[Any]:
        pages = queue.receive_messages(messages_per_page=n,
                                       visibility_timeout=int(lease)).by_page()
        return list(next(pages, []))

    return receive


def _ensure(q: QueueClient) -> None:
    with contextlib.suppress(ResourceExistsError):
        q.create_queue()


def _route_pattern(route: str) -> re.Pattern[str]:
    parts = []
    for seg in route.strip("/").split("/"):
        m = re.fullmatch(r"\{(\w+)(?::\w+)?(\?)?\}", seg)
        if m:
            parts.append(f"(?P<{m.group(1)}>[^/]+){'?' if m.group(2) else ''}")
        else:
            parts.append(re.escape(seg))
    return re.compile("^" + "/".join(parts) + "$")


def _serve_http(host: LocalFunctionHost, functions: list[_Function],
                port: int) -> ThreadingHTTPServer:
    routes = [(_route_pattern(f.trigger.get("route") or f.name),
               {m.upper() for m in f.trigger.get("methods") or ["GET", "POST"]}, f)
              for f in functions]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

        def _dispatch(self) -> None:
            # The body is read only for a caller the route lets in: a request refused before
            # (no route, no key, the host stopping) costs no more than its headers, and its
            # connection is closed rather than left with an unread body in it.
            url = urlsplit(self.path)
            if host.closing:  # a kept-alive connection's request after the host stopped
                return self._stopping()
            path = url.path
            if not path.startswith("/api/"):
                return self._refuse(404, b"not found")
            for pattern, methods, f in routes:
                m = pattern.match(path[len("/api/"):])
                if not m:
                    continue
                if self.command not in methods:
                    # The Functions host answers a method a route does not take with a 404 and
                    # no body, as for no route (azure-functions-host#10098); another function
                    # may take it on the same route.
                    continue
                query = parse_qs(url.query, keep_blank_values=True)
                key = self.headers.get("x-functions-key") or next(iter(query.get("code", [])),
                                                                   None)
                if not host.keys.allow(f.trigger.get("authLevel", "FUNCTION"), key):
                    return self._refuse(401, b"")  # the host answers with an empty body
                body = self._body()
                if body is None:
                    return self._refuse(400, b"")
                # As the worker builds them: repeated query keys joined with commas, route
                # values percent-decoded.
                req = TriggerData(triggers.http_request, dict(
                    method=self.command, url=f"http://127.0.0.1:{port}{self.path}",
                    headers=dict(self.headers.items()),
                    query={k: ",".join(v) for k, v in query.items()},
                    route={k: unquote(v) for k, v in m.groupdict().items() if v is not None},
                    body=body))
                try:
                    resp = host.run(f, req)
                except HostStopping:
                    return self._stopping()
                except Exception:
                    log.exception("%s failed", f.name)
                    return self._reply(500, b"", {})  # the host answers with an empty body
                headers = dict(resp.headers)
                if resp.mimetype and not any(k.lower() == "content-type" for k in headers):
                    headers["Content-Type"] = f"{resp.mimetype}; charset={resp.charset or 'utf-8'}"
                return self._reply(resp.status_code, resp.get_body(), headers)
            return self._refuse(404, b"")

        def _body(self) -> bytes | None:
            """The request's body, or None when its Content-Length is no length."""
            given = self.headers.get("Content-Length") or "0"
            if not re.fullmatch(r"[0-9]+", given):  # the host answers 400 to a malformed length
                return None
            length = int(given)
            return self.rfile.read(length) if length else b""

        def _refuse(self, status: int, body: bytes) -> None:
            """An answer before the request's body was read: the connection cannot carry
            another request after an unread body, so it is closed."""
            if self.headers.get("Content-Length", "0") not in ("", "0") \
                    or self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                return self._reply(status, body, {"Connection": "close"})
            return self._reply(status, body, {})

        def _stopping(self) -> None:
            # What a host that is shutting down answers: try again (elsewhere, or later).
            self.close_connection = True
            self._reply(503, b"the function host is stopping\n",
                        {"Content-Type": "text/plain; charset=utf-8", "Connection": "close",
                         "Retry-After": "5"})

        def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            try:
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                # The caller gave up (an Agent at its complete-by): nobody to answer.
                self.close_connection = True

        def __getattr__(self, name: str) -> Any:
            # Any method at all (TRACE, QUERY, ...) goes through the routes: http.server would
            # answer 501 to one it does not know, the Functions host a 404.
            if name.startswith("do_"):
                return self._dispatch
            raise AttributeError(name)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        # The default backlog of 5 drops bursts of connections; the client then waits seconds
        # for a SYN retransmit, which looks like a slow service.
        request_queue_size = 256

    return Server(("127.0.0.1", port), Handler)
