"""What the local host has under way and has done (HostStats), the function each thread runs
for it (current_function, for the storage meter), and what an invocation asked for after it
stopped taking work is told (HostStopping)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

_current = threading.local()


def current_function() -> str | None:
    """The function this thread is running for the local host, if any (for metering)."""
    return getattr(_current, "function", None)


@contextlib.contextmanager
def running(function: str) -> Iterator[None]:
    """This thread runs ``function`` for the host until the block ends (current_function)."""
    _current.function = function
    try:
        yield
    finally:
        _current.function = None


class HostStopping(RuntimeError):
    """An invocation asked for once the host had stopped taking work: it never runs."""


@dataclass
class HostStats:
    invocations: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    # CPU seconds of the invoking thread, by function: what each function's code (and the SDK
    # calls it makes) costs this process, apart from the host's side of its messages.
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    poisoned: int = 0
    dead_lettered: int = 0
    listener_failures: list[str] = field(default_factory=list)
    # Invocations under way and messages not yet settled: whoever counts the app's requests
    # (the demo, the bench) waits for 0, when every request the work made has been metered.
    busy: int = 0
    # Of those, the invocations under way (what a stop abandons if they outlast its grace).
    invoking: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _idle: threading.Condition = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._idle = threading.Condition(self._lock)

    @contextlib.contextmanager
    def working(self, invocation: bool = False) -> Iterator[None]:
        with self._lock:
            self.busy += 1
            self.invoking += invocation
        try:
            yield
        finally:
            with self._lock:
                self.busy -= 1
                self.invoking -= invocation
                if self.busy == 0:
                    self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for nothing to be under way; whether it came to that."""
        with self._idle:
            return self._idle.wait_for(lambda: self.busy == 0, timeout)

    def count(self, name: str, ok: bool, cpu: float = 0.0) -> None:
        with self._lock:
            self.invocations[name] = self.invocations.get(name, 0) + 1
            self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + cpu
            if not ok:
                self.failures[name] = self.failures.get(name, 0) + 1

    def outputs_failed(self, name: str) -> None:
        """An invocation counted as returned whose outputs could not be sent: it failed."""
        with self._lock:
            self.failures[name] = self.failures.get(name, 0) + 1
