"""Health checks: is the app's storage reachable, and, for an operator, how is the app doing?

Every check runs at once, and the answer comes within a deadline. A monitor gets the verdict, an
operator the details too (docs/operating.md, Health).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import datetime
from typing import Any

from azure.core.exceptions import ResourceNotFoundError

from shared.circuit_breaker import CircuitBreaker
from shared.clock import Clock, utc_now
from shared.handlers.failures import describe

log = logging.getLogger(__name__)

Check = Callable[[], object]

# Well inside a caller's patience: the checks' own timeouts are shorter still.
DEADLINE_SECONDS = 4.0


class HealthProbe:
    """Each check uses clients that try once with short timeouts (``probe_options``); the checks
    run in parallel, and one that has not answered by the deadline is reported as such, so a
    storage outage is a prompt 503, never a request the caller's front end gives up on."""

    def __init__(self, checks: Mapping[str, Check], deadline: float = DEADLINE_SECONDS, *,
                 queues: Mapping[str, Check] | None = None,
                 poison: Mapping[str, Check] | None = None,
                 breakers: Mapping[str, CircuitBreaker] | None = None,
                 last_tick: Callable[[], datetime | None] | None = None,
                 tick_gap_seconds: float | None = None, clock: Clock = utc_now) -> None:
        """``checks`` and ``queues`` (a queue's properties, by queue name) decide the status;
        ``poison`` (the same, of each poison queue, which may not exist yet), ``breakers`` and
        ``last_tick`` are reported to operators only. A tick older than ``tick_gap_seconds``
        is late: the gap the Supervisor itself counts as an outage."""
        self._checks = {**checks, **{f"queue:{q}": c for q, c in (queues or {}).items()}}
        self._queues = dict(queues or {})
        self._poison = dict(poison or {})
        self._breakers = dict(breakers or {})
        self._last_tick = last_tick
        self._tick_gap = tick_gap_seconds
        self._deadline = deadline
        self._clock = clock

    def run(self, detailed: bool = False) -> dict[str, Any]:
        """The status and each check's outcome; with ``detailed``, an operator's answer
        (docs/operating.md, Health). Only that one says why a check failed: an error's text can
        name hosts, accounts and settings, and a monitor needs only the verdict."""
        extra: dict[str, Check] = {}
        if detailed:
            extra = {f"poison:{q}": c for q, c in self._poison.items()}
            if self._last_tick is not None:
                extra["tick"] = self._last_tick
        jobs = {**self._checks, **extra}
        pool = ThreadPoolExecutor(max_workers=max(1, len(jobs)), thread_name_prefix="health")
        try:
            futures = {name: pool.submit(check) for name, check in jobs.items()}
            wait(futures.values(), timeout=self._deadline)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)  # a hung check is not waited for
        checks = {name: _outcome(futures[name], self._deadline, detailed)
                  for name in self._checks}
        report: dict[str, Any] = {
            "status": "ok" if all(v == "ok" for v in checks.values()) else "unhealthy",
            "checks": checks}
        if not detailed:
            return report
        report["breakers"] = {name: b.state for name, b in sorted(self._breakers.items())}
        report["backlog"] = {q: _count(futures[f"queue:{q}"]) for q in self._queues}
        report["poison"] = {q: _count(futures[f"poison:{q}"], absent=0) for q in self._poison}
        report["supervisor"] = self._supervisor(futures.get("tick"))
        return report

    def _supervisor(self, tick: Future[Any] | None) -> dict[str, Any]:
        if tick is None:
            return {"last_tick": None, "seconds_since": None, "late": None,
                    "problem": "not reported"}
        if not tick.done() or tick.exception() is not None:
            return {"last_tick": None, "seconds_since": None, "late": None,
                    "problem": _outcome(tick, self._deadline, True)}
        last: datetime | None = tick.result()
        if last is None:
            return {"last_tick": None, "seconds_since": None, "late": True,
                    "problem": "no tick recorded yet"}
        since = round((self._clock() - last).total_seconds(), 1)
        late = self._tick_gap is not None and since > self._tick_gap
        return {"last_tick": last.isoformat(), "seconds_since": since, "late": late,
                "problem": (f"no tick for {since:g} s (expected within {self._tick_gap:g} s)"
                            if late else None)}


def _count(future: Future[Any], absent: int | None = None) -> int | None:
    """A queue's approximate message count; None when it could not be read (its check says
    why), ``absent`` when the queue does not exist."""
    if not future.done():
        return None
    e = future.exception()
    if isinstance(e, ResourceNotFoundError):
        return absent
    if e is not None:
        return None
    count = getattr(future.result(), "approximate_message_count", None)
    return count if isinstance(count, int) else None


def _outcome(future: Future[Any], deadline: float, detailed: bool) -> str:
    if not future.done():
        return f"no answer within {deadline:g} s"
    e = future.exception()
    if e is None:
        return "ok"
    log.warning("health check failed: %r", e)  # the whole story, for whoever reads the log
    return describe(e) if detailed else "failed"
