"""CPU spent by named processes while a block runs: what the bench's throughput is bound by.

The bench compares the app to the rate at which Azurite serves its requests. On a small machine
Azurite is not the only thing that can run out: the app's process (with the local host and the
harness) and Azurite share the same cores. Busy cores per process, over the same window as a
rate, say which of them was the limit.
"""
from __future__ import annotations

import time
from types import TracebackType

import psutil


class CpuUse:
    """``with CpuUse(azurite=pid, bench_process=None) as use:`` ... then ``use.seconds`` (CPU
    seconds each process spent in the block, user and system, all threads) and ``use.cores``
    (those seconds over the block's wall time). ``None`` is this process."""

    def __init__(self, **processes: int | None) -> None:
        self._processes = {name: psutil.Process(pid) for name, pid in processes.items()}
        self.seconds: dict[str, float] = {}
        self.cores: dict[str, float] = {}
        self.wall = 0.0

    def _now(self) -> dict[str, float]:
        out = {}
        for name, p in self._processes.items():
            t = p.cpu_times()
            out[name] = t.user + t.system
        return out

    def start(self) -> CpuUse:
        self._start, self._t0 = self._now(), time.perf_counter()
        return self

    def stop(self) -> None:
        self.wall = time.perf_counter() - self._t0
        end = self._now()
        self.seconds = {name: end[name] - self._start[name] for name in end}
        self.cores = {name: s / self.wall if self.wall > 0 else 0.0
                      for name, s in self.seconds.items()}

    def __enter__(self) -> CpuUse:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
