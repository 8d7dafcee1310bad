"""Where a service's limit is kept and taken (shared/domain/limits.py): one entity per limited
service, in a partition of its own beside the due-time index, written only at the version it
was read at.

What a call to a limited service costs in storage transactions (docs/operating.md, Limits per
service): one conditional write for its grant, and one more to give its lease back when the
service has ``at_once``; a read besides after another instance wrote since (each instance
keeps the record it last wrote or read), and at most one read every ``POLL`` seconds per
instance while its calls wait. A service with no limit has no limiter: its calls cost nothing.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from azure.core.exceptions import AzureError, ResourceNotFoundError
from azure.data.tables import TableClient

from shared.adapters.state_store import ConcurrencyConflict
from shared.adapters.versioned import put_at_version
from shared.domain import budget, text
from shared.domain.limits import (
    HORIZON,
    Grant,
    Limit,
    LimitState,
    bounded,
    give_back,
    grant,
    slow_down,
)

log = logging.getLogger(__name__)

LIMITS_PARTITION = "limits"
# How stale an instance's view may be before a waiting call reads the record again: other
# instances' calls give their leases back, and nothing tells this one.
POLL = 0.25
# Conditional writes tried before a lease or a slow-down is left to its deadline (each retry
# follows a write by another instance that won).
WRITES = 5


class LimitStore(Protocol):
    def read(self, service: str) -> tuple[LimitState, str | None]:
        """The service's record and its version (None: never written)."""
        ...

    def write(self, service: str, state: LimitState, version: str | None) -> str:
        """Replace the record read at ``version`` and return the new version;
        ConcurrencyConflict if it moved on."""
        ...


def to_entity(service: str, state: LimitState) -> dict[str, Any]:
    return {"PartitionKey": LIMITS_PARTITION, "RowKey": service, "SchemaVersion": 1,
            "NextStart": state.next_start, "Leases": state.leases_to_json(),
            "SlowUntil": state.slow_until, "SlowReason": state.slow_reason}


def from_entity(e: Any) -> LimitState:
    def number(name: str) -> float:
        value = e.get(name)
        return float(value) if isinstance(value, int | float) else 0.0
    return LimitState(next_start=number("NextStart"),
                      leases=LimitState.leases_from_json(e.get("Leases")),
                      slow_until=number("SlowUntil"),
                      slow_reason=str(e.get("SlowReason") or ""))


class TableLimits:
    def __init__(self, table: TableClient) -> None:
        self._table = table

    def read(self, service: str) -> tuple[LimitState, str | None]:
        try:
            e = self._table.get_entity(LIMITS_PARTITION, service)
        except ResourceNotFoundError:
            return LimitState(), None
        return from_entity(e), e.metadata["etag"]

    def write(self, service: str, state: LimitState, version: str | None) -> str:
        return put_at_version(self._table, to_entity(service, state), version,
                              f"the {service} limit")


class NoSlot(Exception):
    """No grant could start before the call's deadline: the service is at its limit."""


class ServiceLimiter:
    """One instance's side of a service's limit: takes a grant before each call and gives its
    lease back after. The instance's calls share one view of the record (and one read of it
    while they wait); a write another instance beat is read again and decided afresh.

    Its store's requests must be short (a client of their own with short timeouts: bootstrap),
    since the instance's calls to the service wait for them; giving a lease back is done in
    the ``background`` (by default a thread of the limiter's), off the reply's way."""

    def __init__(self, service: str, limit: Limit, store: LimitStore, *,
                 now: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 poll: float = POLL, instance: str | None = None,
                 longest_call: float = 60.0,
                 background: Callable[[Callable[[], None]], object] | None = None) -> None:
        self.service = service
        self.limit = limit
        self._store = store
        self._now = now
        self._sleep = sleep
        self._poll = poll
        # A process's own: two processes never share a lease id.
        self._instance = instance or uuid.uuid4().hex[:12]
        self._ids = itertools.count(1)
        self._longest = longest_call
        self._background = background or _releaser().submit
        self._lock = threading.Lock()
        self._state: LimitState | None = None
        self._version: str | None = None
        self._read_at = 0.0
        self._began = -math.inf  # when this instance's latest call was let begin
        self._pace = threading.Lock()

    def _view(self, fresh: bool) -> LimitState:
        """The record as this instance last saw it, read again when ``fresh`` is asked for and
        that view is older than the poll; bounded as this limit and clock allow."""
        if self._state is None or (fresh and self._now() - self._read_at >= self._poll):
            state, self._version = self._store.read(self.service)
            self._read_at = self._now()
            self._state = bounded(state, self.limit, self._read_at, self._longest)
        return self._state

    def _forget(self) -> None:
        self._state = None

    def acquire(self, deadline: float, longest: float,
                stop: Callable[[], None] | None = None) -> Grant:
        """A grant whose start has come (this waits for it), for a call that must start
        before ``deadline`` and lasts at most ``longest``; NoSlot when none can start in time.
        ``stop`` is called while it waits, and once the grant is taken: what it raises ends
        the wait (the grant given back)."""
        late = 0
        while True:
            got = self._take(deadline, min(longest, self._longest), stop)
            try:
                if stop is not None:
                    stop()
                now = self._now()
                if now - got.start <= HORIZON:
                    if got.start > now:
                        self._sleep(got.start - now)
                    self._paced(stop)
                    return got
            except BaseException:
                self.release(got)
                raise
            # Its write took so long that the call would begin next to later grants' calls
            # (or outlive its lease): given back, and asked again.
            self.release(got)
            late += 1
            if late >= WRITES:
                raise NoSlot(f"the {self.service} limit's record answered too slowly")

    def _paced(self, stop: Callable[[], None] | None) -> None:
        """The call begins no sooner than the spacing after this instance's previous one did,
        measured when each was let begin, not when it was granted: a grant taken late (a slow
        write) or whose thread woke late does not begin next to the one after it. So the calls
        one instance sends never exceed the rate in any second, whatever its threads' delays."""
        if self.limit.per_second is None:
            return
        while True:
            with self._pace:
                now = self._now()
                wait = self._began + self.limit.spacing - now
                if wait <= 0:
                    self._began = now
                    return
            if stop is not None:
                stop()
            self._sleep(wait)

    def _take(self, deadline: float, longest: float,
              stop: Callable[[], None] | None) -> Grant:
        lease_id = f"{self._instance}.{next(self._ids)}"
        while True:
            with self._lock:
                now = self._now()
                decision = grant(self.limit, self._view(fresh=False), now, lease_id,
                                 deadline, longest)
                if decision.grant is None and not decision.hopeless:
                    decision = grant(self.limit, self._view(fresh=True), now, lease_id,
                                     deadline, longest)
                if decision.grant is not None:
                    try:
                        self._version = self._store.write(self.service, decision.state,
                                                          self._version)
                    except ConcurrencyConflict:
                        self._forget()
                        continue
                    self._state, self._read_at = decision.state, now
                    return decision.grant
                wake = min(decision.retry_at or now + self._poll, now + self._poll)
            if decision.hopeless or wake >= deadline:
                raise NoSlot(f"the {self.service} service is at its limit "
                             f"({self.limit.describe()})")
            if stop is not None:
                stop()
            self._sleep(max(0.0, wake - now))

    def release(self, held: Grant) -> None:
        """Give the grant's lease back, in the background. Failing that (storage down, or
        beaten every time), the lease ends at its call's deadline anyway: logged, never
        raised."""
        if held.lease is None:
            return
        lease = held.lease
        self._background(lambda: self._update(
            lambda state, now: give_back(state, {lease}, now), "give a lease back"))

    def slow(self, seconds: float | None, reason: str) -> None:
        """The service asked for a wait: every instance's calls to it wait that long."""
        why = budget.clip(text.inert(reason), 200)
        self._update(lambda state, now: slow_down(state, now, seconds, why), "slow down")

    def _update(self, change: Callable[[LimitState, float], LimitState], what: str) -> None:
        try:
            with self._lock:
                for _ in range(WRITES):
                    now = self._now()
                    state = self._view(fresh=False)
                    new = change(state, now)
                    if new == state:
                        return
                    try:
                        self._version = self._store.write(self.service, new, self._version)
                    except ConcurrencyConflict:
                        self._forget()
                        continue
                    self._state, self._read_at = new, now
                    return
        except AzureError as e:
            log.warning("limit %s: could not %s: %s", self.service, what, e)
            return
        log.warning("limit %s: could not %s after %d tries; it ends at its deadline",
                    self.service, what, WRITES)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _releaser() -> ThreadPoolExecutor:
    """The process's threads that give leases back, shared by its limiters."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="limit-release")
        return _pool
