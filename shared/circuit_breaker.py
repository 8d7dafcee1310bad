"""A circuit breaker that lets calls to one service run side by side.

It opens when enough of the calls begun in the last window failed; after a pause it lets one
trial call through, and that call's success closes it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# The window is kept as this many slots of calls, by when they began: memory and the work per
# outcome stay bounded however many calls a second the service takes.
SLOTS = 20


class CircuitOpen(Exception):
    """The breaker is open: the service failed repeatedly, so we are not calling it now."""


class CircuitBreaker:
    """Opens on a failure *rate*, not a run: when at least ``failure_threshold`` of the calls
    begun in the last ``window_seconds`` failed and they are at least half of them. Counting
    consecutive failures trips on a healthy service whose few hung calls time out together
    (`make bench`: 10% silent calls opened it and failed orders that would have recovered).

    Not pybreaker, the common choice: it holds its lock for the whole call, so one process's
    calls to a service run one at a time (`make demo`: with 24 calls in flight, each waited
    about 10 s for the lock and replied after its complete-by). Here the lock guards only the
    counters.
    """

    def __init__(self, name: str, failure_threshold: int, reset_seconds: float, *,
                 window_seconds: float = 20.0,
                 ignore: tuple[type[BaseException], ...] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        if window_seconds <= 0:
            raise ValueError("window_seconds must be positive")
        self.name = name
        self._threshold = failure_threshold
        self._reset = reset_seconds
        self._slot_seconds = window_seconds / SLOTS
        self._ignore = ignore  # errors that say nothing of the service's health
        self._clock = clock
        self._lock = threading.Lock()
        self._slots: dict[int, list[int]] = {}  # slot -> [calls, failures] of calls begun in it
        self._opened_at: float | None = None
        self._trial_running = False

    @property
    def state(self) -> str:
        with self._lock:
            if self._opened_at is None:
                return "closed"
            return "open" if self._clock() - self._opened_at < self._reset else "half-open"

    def allows(self) -> bool:
        """Whether a call made now would be let through (closed, or half-open with no trial
        running): what a caller checks before paying for one, a limit's grant say."""
        with self._lock:
            return self._opened_at is None or (
                self._clock() - self._opened_at >= self._reset and not self._trial_running)

    def call(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        with self._lock:
            began = self._clock()
            trial = False
            if self._opened_at is not None:
                if began - self._opened_at < self._reset or self._trial_running:
                    raise CircuitOpen(f"circuit to {self.name} is open")
                self._trial_running = trial = True  # half-open: one call may try
        try:
            result = fn(*args, **kwargs)
        except self._ignore:
            self._succeeded(began)
            raise
        except Exception:
            self._failed(began, trial)
            raise
        self._succeeded(began)
        return result

    def _succeeded(self, began: float) -> None:
        with self._lock:
            if self._opened_at is not None:
                self._slots.clear()  # the trial (or a straggler) worked: start afresh
            self._count(began, failed=False)
            self._opened_at = None
            self._trial_running = False

    def _failed(self, began: float, trial: bool) -> None:
        with self._lock:
            self._count(began, failed=True)
            calls = sum(c for c, _ in self._slots.values())
            failures = sum(f for _, f in self._slots.values())
            if trial or (failures >= self._threshold and 2 * failures >= calls):
                self._opened_at = self._clock()
            self._trial_running = False

    def _count(self, began: float, *, failed: bool) -> None:
        """Counts one outcome, and forgets the slots that left the window.

        An outcome is counted at the time its call began. A hung call's failure is known only
        when its timeout runs out, long after the calls made beside it succeeded: counted as
        they arrive, late failures crowd the recent past whenever traffic thins, and open the
        breaker on a healthy service (measured: docs/performance-history.md, Recovery). Counted
        by when calls began, they stand beside the calls made with them, and the rate is the
        service's.
        """
        now = int(self._clock() // self._slot_seconds)
        oldest = now - SLOTS + 1
        for slot in [s for s in self._slots if s < oldest]:
            del self._slots[slot]
        slot = int(began // self._slot_seconds)
        # A call that outlived the window has no calls of its time left to stand beside: it
        # counts as of now, so a service whose every call hangs past the window still trips it.
        counts = self._slots.setdefault(slot if slot >= oldest else now, [0, 0])
        counts[0] += 1
        counts[1] += failed
