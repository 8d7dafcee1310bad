"""A service's limit: at most so many calls at once, and so many a second, across the app.

Declared with the service (``HttpService(..., limit=Limit(...))`` or ``CodeService(...,
limit=...)``). Every instance's Agent for the service takes a grant before each call from one
record the instances share (adapters/limits.py), written only at the version it was read at,
so two instances can never both take the last slot:

- **A second:** each grant is a start time, at least ``1 / per_second`` after the one before
  (the generic cell rate algorithm: the record keeps when the next call may start). No two
  calls begin closer together than that, so no second holds more than ``per_second`` starts,
  however many instances call.
- **At once:** each grant is also a lease, until the call's own deadline (its complete-by and
  the Agent's call timeout): the grants whose call has not ended number at most ``at_once``.
  A call that ends gives its lease back; an instance that dies with one holds it only until
  that deadline.
- **Slowed:** a service that answers 429, or asks for a wait with Retry-After, slows every
  instance: no grant starts before the time it named.

Pure: times are seconds since the epoch, by the granting instance's clock (clocks a little
apart make starts that much closer: docs/operating.md, Limits per service).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from shared.domain.declarations import DeclarationError

# Bounds on a declaration: the leases are kept on one record (each about 40 bytes of a
# property that holds 32,768 characters), and a rate past this is no limit a provider sets.
MAX_AT_ONCE = 500
MAX_PER_SECOND = 1000.0
# How far ahead a grant may start: a caller waits at most this long for its start, and a
# start reserved further ahead would hold a lease (at once) before its call began.
HORIZON = 0.25
# Added to a lease past its call's deadline: clocks a little apart, and the call's own end.
LEASE_MARGIN = 2.0
# A 429 that names no wait slows every instance this long.
DEFAULT_SLOW = 1.0
# A service's Retry-After slows every instance up to this: a longer wait would run out every
# step's time at once (the steps whose time runs out are counted as for a slow service).
MAX_SLOW = 60.0


@dataclass(frozen=True)
class Limit:
    """``at_once``: calls in flight across the app; ``per_second``: calls begun a second."""

    at_once: int | None = None
    per_second: float | None = None

    def __post_init__(self) -> None:
        if self.at_once is None and self.per_second is None:
            raise DeclarationError("a limit needs at_once, per_second or both")
        if self.at_once is not None and (
                isinstance(self.at_once, bool) or not isinstance(self.at_once, int)
                or not 1 <= self.at_once <= MAX_AT_ONCE):
            raise DeclarationError(f"at_once is a whole number of calls from 1 to {MAX_AT_ONCE}: "
                                   f"{self.at_once!r}")
        if self.per_second is not None and (
                isinstance(self.per_second, bool)
                or not isinstance(self.per_second, int | float)
                or not math.isfinite(self.per_second)
                or not 0 < self.per_second <= MAX_PER_SECOND):
            raise DeclarationError(f"per_second is a number of calls above 0, at most "
                                   f"{MAX_PER_SECOND:g}: {self.per_second!r}")

    @property
    def spacing(self) -> float:
        """Seconds between two starts (0: no rate): a microsecond over 1/per_second, so that
        starts added up in floating point never bring per_second + 1 into one second."""
        return 0.0 if self.per_second is None else 1.0 / self.per_second + 1e-6

    def describe(self) -> str:
        parts = [f"{self.at_once} at once" if self.at_once is not None else "",
                 f"{self.per_second:g} a second" if self.per_second is not None else ""]
        return ", ".join(p for p in parts if p)


@dataclass(frozen=True)
class Lease:
    id: str
    until: float


@dataclass(frozen=True)
class Grant:
    """One call's permission: when it may start, and its lease (at once) to give back."""
    start: float
    lease: str | None


@dataclass(frozen=True)
class LimitState:
    """The shared record: when the next call may start, the calls in flight, and how long the
    service asked every instance to wait."""

    next_start: float = 0.0
    leases: tuple[Lease, ...] = ()
    slow_until: float = 0.0
    slow_reason: str = ""

    def live(self, now: float) -> tuple[Lease, ...]:
        return tuple(lease for lease in self.leases if lease.until > now)

    def leases_to_json(self) -> str:
        return json.dumps([[lease.id, round(lease.until, 3)] for lease in self.leases],
                          separators=(",", ":"))

    @staticmethod
    def leases_from_json(raw: object) -> tuple[Lease, ...]:
        """The leases kept, or none for a value this release cannot read (a lease it cannot
        read can only be one whose deadline passes: dropping it lets at most that call's
        worth more run, once, until the deadline)."""
        try:
            items = json.loads(raw) if isinstance(raw, str) else []
            return tuple(Lease(str(i), float(u)) for i, u in items)
        except (ValueError, TypeError):
            return ()


@dataclass(frozen=True)
class Decision:
    """What ``grant`` decided: the new record and the grant, or no grant and when to ask
    again (``retry_at``; None: when another instance may have given a lease back), or that
    none can start before the call's deadline (``hopeless``)."""

    state: LimitState
    grant: Grant | None
    retry_at: float | None = None
    hopeless: bool = False


def bounded(state: LimitState, limit: Limit, now: float, longest: float) -> LimitState:
    """The record as no instance with a sane clock and this limit could have written it: a
    host whose clock ran ahead, a rate since raised, a value not a number, can hold no call
    back longer than the limit itself would (``longest``: the longest call a lease covers)."""
    def at_most(value: float, cap: float) -> float:
        return min(value, cap) if math.isfinite(value) else now
    return replace(
        state,
        next_start=at_most(state.next_start, now + HORIZON + limit.spacing),
        slow_until=at_most(state.slow_until, now + MAX_SLOW),
        leases=tuple(replace(lease, until=min(lease.until, now + HORIZON + longest
                                              + LEASE_MARGIN))
                     for lease in state.leases if math.isfinite(lease.until)))


def grant(limit: Limit, state: LimitState, now: float, lease_id: str, deadline: float,
          longest: float) -> Decision:
    """One more call, starting at ``now`` or soon after but before ``deadline``, and lasting
    at most ``longest`` seconds (its lease ends then, and LEASE_MARGIN later)."""
    start = max(now, state.next_start, state.slow_until)
    if start >= deadline:
        return Decision(state, None, start, hopeless=True)
    if start - now > HORIZON:
        return Decision(state, None, start - HORIZON)
    live = state.live(now)
    if limit.at_once is not None and len(live) >= limit.at_once:
        # Full: a lease frees when its call ends (not known here) or at its deadline.
        return Decision(replace(state, leases=live), None,
                        min(lease.until for lease in live) if live else None)
    lease = (Lease(lease_id, start + max(longest, 0.0) + LEASE_MARGIN)
             if limit.at_once is not None else None)
    new = replace(state, leases=live + ((lease,) if lease else ()),
                  next_start=start + limit.spacing if limit.per_second else state.next_start)
    return Decision(new, Grant(start, lease.id if lease else None))


def give_back(state: LimitState, lease_ids: set[str], now: float) -> LimitState:
    return replace(state, leases=tuple(lease for lease in state.live(now)
                                       if lease.id not in lease_ids))


def slow_down(state: LimitState, now: float, seconds: float | None,
              reason: str) -> LimitState:
    """The service asked for a wait (429, or Retry-After): no grant starts before its end."""
    wait = DEFAULT_SLOW if seconds is None or not math.isfinite(seconds) else seconds
    until = now + min(max(wait, 0.0), MAX_SLOW)
    if until <= state.slow_until:
        return state
    return replace(state, slow_until=until, slow_reason=reason)
