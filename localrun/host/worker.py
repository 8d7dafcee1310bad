"""The Python worker in a process of its own, as in Azure.

In Azure the Functions host (.NET) runs the listeners, settles the messages and serves HTTP; the
Python worker is another process, which it hands each invocation over gRPC: the trigger's data,
from which the worker builds the value and runs the function on its thread pool. By default the
local host runs the functions in its own process, so that its side of every message (receive,
renew, settle, serve) takes the same GIL as the functions. With a ``WorkerProcess`` it does as
Azure does: the host's side stays in the host's process, and each invocation crosses a pipe as
``TriggerData`` (plain values) to a process that imports the app, builds the value with the
library's converters and runs it on one shared pool of ``PYTHON_THREADPOOL_THREAD_COUNT``
threads. The app settings are that process's environment, as in the worker.

A metered worker counts its storage requests by function and its log records (``counts()``),
for the benchmark: the host's process cannot see them.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localrun.host.triggers import TriggerData


class InvocationFailed(RuntimeError):
    """The function failed in the worker process (or the process went away)."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    # The function's return value, or what went wrong.
    value: Any
    # The invoking thread's CPU seconds: building the value and running the function.
    cpu_seconds: float = 0.0
    # What the function set on each queue output binding, by name: the host sends these, as
    # the Functions host sends the output data of the worker's answer.
    outputs: dict[str, Any] = field(default_factory=dict)

    def result(self) -> Any:
        if not self.ok:
            raise InvocationFailed(self.value)
        return self.value


@dataclass(frozen=True)
class WorkerCounts:
    """What a metered worker counted since it started or was last reset."""

    per_function: dict[str, dict[str, int]] = field(default_factory=dict)
    entities_read: int = 0
    log_records: int = 0
    log_bytes: int = 0
    log_records_by_logger: dict[str, int] = field(default_factory=dict)


class WorkerProcess:
    """The app (``"module:attribute"``) in a child process, as the host's Python worker."""

    def __init__(self, app: str, *, settings: Mapping[str, str], storage_connection: str,
                 host_json: Path, metered: bool = False) -> None:
        self._args = (app, dict(settings), storage_connection, str(host_json), metered,
                      logging.getLogger().level)
        self._process: Any = None
        self._conn: Any = None
        self._ids = itertools.count()
        self._pending: dict[int, Future[Any]] = {}
        self._gone = False  # the process's end of the pipe closed: nothing more will answer
        self._lock = threading.Lock()

    def start(self) -> WorkerProcess:
        if self._process is not None:
            return self
        # Spawned, not forked: the host's process has threads running, and a fork would copy
        # their locks in whatever state they are.
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, *self._args),
                                    name="python-worker", daemon=True)
        self._process.start()
        child.close()
        threading.Thread(target=self._read, name="host-worker-channel", daemon=True).start()
        self._call("ready")  # the app imported and indexed: invocations may follow
        return self

    @property
    def pid(self) -> int:
        return int(self._process.pid)

    def invoke(self, function: str, trigger: TriggerData) -> Outcome:
        try:
            result: Outcome = self._call("invoke", function, trigger)
        except InvocationFailed as e:
            return Outcome(False, str(e))
        return result

    def counts(self) -> WorkerCounts:
        result: WorkerCounts = self._call("counts")
        return result

    def reset_counts(self) -> None:
        self._call("reset")

    def stop(self) -> None:
        if self._process is None:
            return
        with contextlib.suppress(OSError), self._lock:
            self._conn.send(None)
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()
        self._conn.close()

    def _call(self, kind: str, *args: Any) -> Any:
        future: Future[Any] = Future()
        with self._lock:
            if self._gone:
                raise InvocationFailed("the worker process is not running")
            i = next(self._ids)
            self._pending[i] = future
            try:
                self._conn.send((kind, i, *args))
            except OSError:
                self._pending.pop(i)
                raise InvocationFailed("the worker process is not running") from None
        return future.result()

    def _read(self) -> None:
        while True:
            try:
                i, value = self._conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future = self._pending.pop(i)
            future.set_result(value)
        # The process is gone: what it held will not be answered (the host abandons those
        # messages, and they come back after their visibility timeout).
        with self._lock:
            self._gone = True
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(InvocationFailed("the worker process exited"))


def _serve(conn: Any, app_ref: str, settings: dict[str, str], storage_connection: str,
           host_json: str, metered: bool, log_level: int) -> None:
    """The worker process: import the app, then run what the host sends until it says stop."""
    os.environ.update(settings)
    logging.getLogger().setLevel(log_level)
    from localrun.host.host import LocalFunctionHost
    from localrun.host.index import functions_of

    module, _, attribute = app_ref.partition(":")
    # The app first: importing it hands the workflows to bootstrap, as the host's indexing does.
    app = getattr(importlib.import_module(module), attribute)
    meter = logs = None
    if metered:
        from localrun.metering import LogCounter, StorageMeter
        from shared import bootstrap
        from shared.settings import load_settings

        meter, logs = StorageMeter(), LogCounter().__enter__()
        bootstrap.reset(bootstrap.build(load_settings(settings),
                                        table_options=meter.table_options,
                                        queue_options=meter.queue_options))
    functions = {f.name: f for f in functions_of(app)}
    # Only its call() and its pool: this host's listeners never start.
    host = LocalFunctionHost(app, settings=settings, storage_connection=storage_connection,
                             host_json=Path(host_json))
    send_lock = threading.Lock()

    def reply(i: int, value: Any) -> None:
        with send_lock:
            try:
                conn.send((i, value))
            except Exception as e:  # a value that does not pickle: the invocation fails
                conn.send((i, Outcome(False, f"the result could not be sent: {e!r}")))

    def invoke(i: int, function: str, trigger: TriggerData) -> None:
        started = time.thread_time()
        try:
            value, outputs = host.call(functions[function], trigger.build())
            outcome = Outcome(True, value, time.thread_time() - started, outputs)
        except Exception as e:  # call() logged it
            outcome = Outcome(False, f"{function}: {type(e).__name__}: {e}",
                              time.thread_time() - started)
        reply(i, outcome)

    def counts() -> WorkerCounts:
        if meter is None or logs is None:
            return WorkerCounts()
        return WorkerCounts(meter.per_function(), meter.snapshot()["entities_read"],
                            logs.records, logs.bytes, dict(logs.by_logger))

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        kind, i, *args = message
        if kind == "invoke":
            host.submit(invoke, i, *args)
        elif kind == "counts":
            reply(i, counts())
        elif kind == "reset":
            if meter is not None and logs is not None:
                meter.reset()
                logs.reset()
            reply(i, None)
        else:  # "ready"
            reply(i, None)
    host.stop()
