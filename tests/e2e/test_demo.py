"""`make demo` as a user runs it: it finishes, its numbers add up, it leaves nothing behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from localrun.azurite import free_port
from tests.bench.test_bench_smoke import FAULT_FREE_3_STEP
from tests.conftest import ROOT, wait_until


def demo(data: Path, orders: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "localrun", "demo", "--orders", str(orders), "--port",
         str(free_port()), "--data", str(data), "--timeout", "300", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("AzureWebJobs")})


def read_until(p: subprocess.Popen[str], prefix: str, seconds: float) -> str:
    """What the process printed up to and including the first line starting with prefix."""
    assert p.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        seen.append(line)
        if line.startswith(prefix) or not line:
            break
    return "".join(seen)


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
        assert "storage transactions per order" in out
        assert "stopped the function app and Azurite" in out
        assert servers_on(data) == []


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


def test_ctrl_c_stops_everything(tmp_path: Path) -> None:
    data = tmp_path / "azurite"
    p = demo(data, 400)
    seen = read_until(p, "sent ", 120)
    assert "\nsent " in seen, seen
    assert servers_on(data), "Azurite should be running mid-demo"
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 130, out[-2000:]
    assert "interrupted" in out
    wait_until(lambda: servers_on(data) == [], timeout=10, message="Azurite to stop")


def test_serve_keeps_the_console_up_until_ctrl_c(tmp_path: Path) -> None:
    data = tmp_path / "azurite"
    p = demo(data, 5, "--serve")
    try:
        text = read_until(p, "still serving", 300)
        m = re.search(r"still serving the operator console: (\S+)", text)
        assert m, text[-3000:]
        page = httpx.get(m.group(1), timeout=10)
        assert page.status_code == 200 and "<title>Orders" in page.text
        overview = httpx.get(m.group(1).replace("/console?", "/overview?"), timeout=10).json()
        assert sum(overview["ByState"].values()) == 5
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:  # a failed assertion must not leave it serving
            p.kill()
            p.wait()
            subprocess.run(["pkill", "-f", f"location {data}"], check=False)
    assert p.returncode == 0, out[-2000:]
    assert "stopped the function app and Azurite" in out
    wait_until(lambda: servers_on(data) == [], timeout=10, message="Azurite to stop")
