"""The rolling rehearsal's releases and hosts (rolling.py): the previous release checked out
from this clone's history beside this one, and ``python -m localrun host`` of a release in a
process of its own, killed as the platform may kill it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.workflows import REGISTRY

ROOT = Path(__file__).resolve().parents[2]


def git(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=check, capture_output=True,
                          text=True)


def has_commit(commit: str) -> bool:
    """Whether this clone's history holds the commit (a shallow CI clone may not)."""
    return git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """The release at ``commit``, checked out beside this one; removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="rolling-"))
    tree = tmp / "previous"
    git("worktree", "add", "--detach", str(tree), commit)
    try:
        yield tree
    finally:
        git("worktree", "remove", "--force", str(tree), check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        git("worktree", "prune", check=False)


@dataclass(frozen=True)
class Release:
    label: str  # the short commit, or "current"
    root: Path  # its checkout: the host's working directory and import path


class HostProcess:
    """``python -m localrun host`` of one release, in a process (and session) of its own."""

    def __init__(self, name: str, release: Release, env: Mapping[str, str], logs: Path,
                 lease: float, sim_url: str | None = None) -> None:
        """``sim_url``: where its Agents reach the simulated services (by default its own)."""
        from localrun.azurite import free_port

        self.name, self.release = name, release
        self.port = free_port()
        self.run = f"{name}@{release.label}"
        self.log = logs / f"{self.run}.log"
        self.out = logs / f"{self.run}.out"
        sim = sim_url or f"http://127.0.0.1:{self.port}/api/sim"
        # Each by name: an earlier release may not derive them from SimulatorBaseUrl.
        services = {f"{s.capitalize()}ServiceUrl": f"{sim}/{s}" for s in REGISTRY.services}
        host_env = {
            **{k: v for k, v in os.environ.items()
               if not k.startswith(("AzureWebJobs", "PYTHONPATH"))},
            **env, **services, "SimulatorBaseUrl": sim,
            "SchedulerInstanceId": self.run,
            # Its own code only: the release's checkout first on the import path.
            "PYTHONPATH": str(release.root), "LOCALRUN_LOG_LEVEL": "WARNING",
        }
        from localrun.azurite import _die_with_parent

        self.started_at = time.monotonic()
        # Only its command line is asked of a release, never a module of its: an earlier one
        # has its own localrun layout (flat, before localrun/host/ and the rest).
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "localrun", "host", "--port", str(self.port),
             "--poll-interval", "0.2", "--settings", "/nonexistent",
             "--lease-seconds", str(lease), "--lock-seconds", str(lease),
             "--record-messages", str(logs / f"{self.run}.messages.jsonl")],
            cwd=release.root, env=host_env, stdout=self.out.open("w"),
            stderr=self.log.open("w"), start_new_session=True, preexec_fn=_die_with_parent)
        self.ready_at: float | None = None
        self.stats: dict[str, Any] = {}

    def wait_started(self, timeout: float = 60.0) -> HostProcess:
        deadline = time.monotonic() + timeout
        while '"event": "started"' not in self.out.read_text():
            if self.proc.poll() is not None:
                raise RuntimeError(f"host {self.run} exited with {self.proc.returncode}:\n"
                                   f"{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"host {self.run} did not start in {timeout:.0f}s")
            time.sleep(0.1)
        self.ready_at = time.monotonic()
        return self

    @property
    def up(self) -> bool:
        return self.ready_at is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, whatever it is doing: no clean-up, its leased messages come back later."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> dict[str, Any]:
        """SIGTERM, and what it ran (its "stopped" line)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
        for line in self.out.read_text().splitlines():
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict) and doc.get("event") == "stopped":
                    self.stats = doc
        return self.stats
