"""CPU spent by named processes while a block runs: what the bench's throughput is bound by.

The bench compares the app to the rate at which Azurite serves its requests. On a small machine
Azurite is not the only thing that can run out: the app's process (with the local host and the
harness) and Azurite share the same cores. Busy cores per process, over the same window as a
rate, say which of them was the limit; the seconds of this process's threads, by whose work
each does, say where its share went.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from types import TracebackType

import psutil

# Whose work a thread of this process does, from its name.
Roles = Callable[[str], str]
OTHER = "other"


def _threads() -> dict[int, tuple[str, float]]:
    """Each live thread of this process: its name and CPU seconds so far, by native id."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    return {t.id: (names.get(t.id, ""), t.user_time + t.system_time)
            for t in psutil.Process().threads()}


class CpuUse:
    """``with CpuUse(azurite=pid, bench_process=None) as use:`` ... then ``use.seconds`` (CPU
    seconds each process spent in the block, user and system, all threads) and ``use.cores``
    (those seconds over the block's wall time). ``None`` is this process.

    With ``roles`` (a thread's name -> whose work it does), ``use.by_role`` splits this
    process's seconds by the threads that spent them. A thread that ended inside the block takes
    its seconds out of the list with it: they are left under ``"other"``, with the threads
    ``roles`` does not know. Linux counts each thread's time in clock ticks (10 ms), so each
    thread's share is good to a tick or so: over a run of minutes, well under a percent."""

    def __init__(self, roles: Roles | None = None, **processes: int | None) -> None:
        self._processes = {name: psutil.Process(pid) for name, pid in processes.items()}
        self._roles = roles
        self._own = psutil.Process()
        self.seconds: dict[str, float] = {}
        self.cores: dict[str, float] = {}
        self.by_role: dict[str, float] = {}
        self.wall = 0.0

    def _now(self) -> dict[str, float]:
        out = {}
        for name, p in self._processes.items():
            t = p.cpu_times()
            out[name] = t.user + t.system
        return out

    def _own_seconds(self) -> float:
        t = self._own.cpu_times()
        return float(t.user + t.system)

    def start(self) -> CpuUse:
        if self._roles:
            self._threads_at_start, self._own_at_start = _threads(), self._own_seconds()
        self._start, self._t0 = self._now(), time.perf_counter()
        return self

    def stop(self) -> None:
        self.wall = time.perf_counter() - self._t0
        end = self._now()
        self.seconds = {name: end[name] - self._start[name] for name in end}
        self.cores = {name: s / self.wall if self.wall > 0 else 0.0
                      for name, s in self.seconds.items()}
        if self._roles:
            self.by_role = self._split(self._roles)

    def _split(self, roles: Roles) -> dict[str, float]:
        now, total = _threads(), self._own_seconds() - self._own_at_start
        out: defaultdict[str, float] = defaultdict(float)
        for tid, (name, seconds) in now.items():
            before = self._threads_at_start.get(tid)
            # A native id can be reused: a thread is the same one only under the same name.
            spent = seconds - before[1] if before and before[0] == name else seconds
            out[roles(name) if name else OTHER] += spent
        out[OTHER] += max(0.0, total - sum(out.values()))
        return dict(out)

    def __enter__(self) -> CpuUse:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
