"""The bench's CPU meter: each named process's own CPU, not the machine's nor another's."""

from __future__ import annotations

import subprocess
import sys
import time

from localrun.bench import cpu_limit
from localrun.cpu import CpuUse


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
    # The kernel counts CPU in clock ticks (10 ms): a tick either side.
    assert use.seconds["spinning"] >= 0.29
    assert use.seconds["waiting"] < 0.05
    assert use.cores["spinning"] == use.seconds["spinning"] / use.wall
    assert 0 < use.cores["spinning"] <= 1.05  # one thread: at most one core


def test_the_report_names_the_process_that_was_the_limit() -> None:
    assert "Azurite was busy near a whole core" in cpu_limit(
        {"azurite": 0.95, "bench_process": 0.9})
    assert "Azurite was not the limit: the Python process" in cpu_limit(
        {"azurite": 0.5, "bench_process": 0.88})
    assert "Neither process" in cpu_limit({"azurite": 0.3, "bench_process": 0.4})
