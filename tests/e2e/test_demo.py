"""`make demo` as a user runs it: it finishes, its numbers add up, it leaves nothing behind."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx

from localrun.azurite import free_port
from tests.bench.test_bench_smoke import FAULT_FREE_3_STEP
from tests.conftest import ROOT, wait_until


def demo(data: Path, orders: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "localrun", "demo", "--orders", str(orders), "--port",
         str(free_port()), "--data", str(data), "--timeout", "300", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("AzureWebJobs")},
        # As a shell starts a job in the background (CI may run these tests so): SIGINT
        # ignored. It used to stay ignored in the demo, which then ran to its end.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))


class Output:
    """A process's output as it comes, read on a thread of its own: a wait for a line ends at
    its deadline whatever the process does (a readline would wait for it to print, maybe
    forever)."""

    def __init__(self, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(p.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def until(self, match: Callable[[str], bool], seconds: float) -> str:
        """What came, through the first line that matches, the end, or the deadline."""
        seen: list[str] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                self._lines.put(None)  # the end, for the next caller too
                break
            seen.append(line)
            if match(line):
                break
        return "".join(seen)

    def rest(self, seconds: float) -> str:
        return self.until(lambda _: False, seconds)


def run_cli(printed: str, cwd: Path) -> str:
    """Run the printed commands as a user pastes them into another shell: the exports, then the
    `list` command (as JSON); that shell has none of the app's settings."""
    lines = [line.strip() for line in printed.splitlines() if line.startswith("  ")]
    setup = [line for line in lines if line.startswith(("export ", "unset "))]
    listing = next(line for line in lines if line.endswith(" list"))
    shell_env = {k: v for k, v in os.environ.items()
                 if k in ("PATH", "HOME", "LANG", "TMPDIR", "SYSTEMROOT")}
    r = subprocess.run(["bash", "-c", "\n".join([*setup, listing + " --json"])], cwd=cwd,
                       env=shell_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def servers_on(data: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-f", f"location {data}"], capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr  # 1: no match; anything else is pgrep failing
    return out.stdout.split()


def row(text: str, label: str) -> int:
    return int(figure(text, label))


def figure(text: str, label: str) -> float:
    m = re.search(rf"│\s+{re.escape(label)}\s+│\s+([\d.]+)", text)
    assert m, f"no row {label!r} in:\n{text}"
    return float(m.group(1))


def test_demo_runs_twice_and_its_summary_adds_up(tmp_path: Path) -> None:
    data = tmp_path / "azurite"
    for _ in range(2):  # a second run in a row works too
        p = demo(data, 20)
        out, _ = p.communicate(timeout=400)
        assert p.returncode == 0, out[-3000:]
        assert row(out, "orders") == 20
        assert row(out, "processed") + row(out, "failed (Error)") == 20
        assert row(out, "of which compensated") <= row(out, "failed (Error)")
        # The first order is named to hang once in its first step: it timed out and was retried.
        assert row(out, "orders retried after a timeout") >= 1
        assert "storage transactions per order" in out
        assert "stopped the function app and Azurite" in out
        assert servers_on(data) == []
        from shared.workflows import REGISTRY

        assert f"workflows: {REGISTRY.describe()}" in out  # what the app runs, as it starts


def test_a_fault_free_demo_counts_as_the_benchmark_does(tmp_path: Path) -> None:
    """From the first order, the app's requests only (not the simulated services')."""
    p = demo(tmp_path / "azurite", 20, "--no-faults")
    out, _ = p.communicate(timeout=400)
    assert p.returncode == 0, out[-3000:]
    assert row(out, "processed") == 20
    writes = figure(out, "table writes per order") - figure(out, "of which the Supervisor's")
    assert round(writes, 1) == FAULT_FREE_3_STEP["table_writes"]
    assert figure(out, "of which the Scheduler's") == FAULT_FREE_3_STEP["scheduler_table_reads"]
    assert figure(out, "queue messages sent per order") == FAULT_FREE_3_STEP["queue_sends"]


def test_ctrl_c_stops_everything_within_5_seconds(tmp_path: Path) -> None:
    """Mid-run for certain: a progress line has shown orders unsettled, and the rest take tens
    of seconds more. Invocations still under way after the grace are abandoned, as a stopping
    host abandons them, not waited for."""
    data = tmp_path / "azurite"
    orders = 400
    p = demo(data, orders)
    output = Output(p)
    seen = output.until(lambda line: line.startswith("progress: "), 180)
    m = re.search(r"^progress: (\d+)/(\d+) settled", seen, re.MULTILINE)
    assert m and int(m.group(2)) == orders, seen[-3000:]
    assert int(m.group(1)) < orders, "the demo must still be at work"
    assert servers_on(data), "Azurite should be running mid-demo"
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    p.wait(timeout=120)
    took = time.monotonic() - sent
    out = output.rest(10)
    assert p.returncode == 130, out[-2000:]
    assert "interrupted" in out and "stopped the function app and Azurite" in out, out[-2000:]
    assert "summary" not in out
    assert "Traceback" not in out
    assert took <= 5, f"Ctrl-C took {took:.1f} s"
    wait_until(lambda: servers_on(data) == [], timeout=10, message="Azurite to stop")


def test_serve_keeps_the_console_up_until_ctrl_c(tmp_path: Path) -> None:
    data = tmp_path / "azurite"
    p = demo(data, 5, "--serve")
    output = Output(p)
    try:
        text = output.until(lambda line: line.startswith("still serving"), 300)
        m = re.search(r"still serving the operator console: (\S+)", text)
        assert m, text[-3000:]
        page = httpx.get(m.group(1), timeout=10)
        assert page.status_code == 200 and "<title>Orders" in page.text
        assert "code=" not in m.group(1)  # no key in the address (docs/security-operators.md)
        overview = httpx.get(m.group(1).replace("/console", "/overview"), timeout=10).json()
        assert sum(overview["ByState"].values()) == 5
        # The commands it printed point the orders CLI at this run, from any directory.
        printed = output.until(lambda line: " watch " in line, 10)
        listed = json.loads(run_cli(printed, tmp_path))
        assert len(listed["orders"]) == 5
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
        took = time.monotonic() - sent
        out = output.rest(10)
    finally:
        if p.poll() is None:  # a failed assertion must not leave it serving
            p.kill()
            p.wait()
            subprocess.run(["pkill", "-f", f"location {data}"], check=False)
    assert p.returncode == 0, out[-2000:]
    assert "stopped the function app and Azurite" in out
    assert took <= 5, f"Ctrl-C took {took:.1f} s"
    wait_until(lambda: servers_on(data) == [], timeout=10, message="Azurite to stop")
