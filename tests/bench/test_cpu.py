"""The bench's CPU meter: each named process's own CPU, not the machine's nor another's."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from localrun.bench.bench import cpu_limit, thread_role
from localrun.bench.cpu import OTHER, CpuUse


def test_each_process_is_charged_its_own_cpu() -> None:
    # A child that has started and now waits on its stdin: it spends no CPU in the block.
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); "
                              "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        with CpuUse(waiting=child.pid, spinning=None) as use:
            t0 = time.process_time()
            while time.process_time() - t0 < 0.3:
                pass
    finally:
        child.communicate("")
    # The kernel counts CPU in clock ticks (10 ms), read at each end: up to a tick short at each
    # (seen: 0.28999999999999915, 29 ticks less a float's rounding).
    assert use.seconds["spinning"] >= 0.3 - 0.02
    assert use.seconds["waiting"] < 0.05
    assert use.cores["spinning"] == use.seconds["spinning"] / use.wall
    assert 0 < use.cores["spinning"] <= 1.05  # one thread: at most one core


def test_the_report_names_the_process_that_was_the_limit() -> None:
    assert "Azurite was busy near a whole core" in cpu_limit(
        {"azurite": 0.95, "bench_process": 0.9})
    assert "Azurite was not the limit: the Python process" in cpu_limit(
        {"azurite": 0.5, "bench_process": 0.88})
    # With the functions in a worker process, the busier of the two Python processes.
    assert "Azurite was not the limit: the worker process" in cpu_limit(
        {"azurite": 0.5, "bench_process": 0.3, "worker_process": 0.9})
    # None near a core, but the three together near the machine's two: the machine's cores.
    shared = cpu_limit({"azurite": 0.56, "bench_process": 0.38, "worker_process": 0.72},
                       machine_cores=2)
    assert "kept 1.66 of the machine's 2 cores busy" in shared
    assert "Neither process" in cpu_limit({"azurite": 0.3, "bench_process": 0.4},
                                          machine_cores=2)


def _spin(seconds: float) -> None:
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass


def test_this_process_s_seconds_are_split_by_the_threads_that_spent_them() -> None:
    # One thread that lives through the block, one that starts and ends in it (its seconds leave
    # with it), and the block's own thread, each spinning its own share; the GIL takes turns.
    spun, idle = threading.Event(), threading.Event()
    lasting = threading.Thread(target=lambda: (_spin(0.2), spun.set(), idle.wait()),
                               name="worker_0")
    with CpuUse(roles=lambda name: "functions" if name.startswith("worker") else name,
                me=None) as use:
        lasting.start()
        passing = threading.Thread(target=_spin, args=(0.1,), name="listener_0")
        passing.start()
        passing.join()
        _spin(0.15)
        assert spun.wait(10)
    idle.set()
    lasting.join()
    tick = 0.02  # the kernel counts in 10 ms ticks
    assert use.by_role["functions"] >= 0.2 - tick
    assert use.by_role["MainThread"] >= 0.15 - tick
    assert use.by_role[OTHER] >= 0.1 - tick  # the thread that ended
    assert sum(use.by_role.values()) == pytest.approx(use.seconds["me"], abs=0.02)


def test_the_local_host_s_threads_are_named_for_whose_work_they_do() -> None:
    assert thread_role("worker_3") == "functions"
    assert thread_role("listener_12") == "host"
    assert thread_role("host-leases") == "host"
    assert thread_role("Thread-7 (process_request_thread)") == "http_server"
    assert thread_role("MainThread") == "harness"
    assert thread_role("ThreadPoolExecutor-4_0") == OTHER
