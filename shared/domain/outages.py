"""When the pipeline itself could not make progress, from the Supervisor's record of its ticks.

A stretch longer than ``OutageGapSeconds`` between two completed ticks is an outage: a step whose
time fell in one, or in the recovery after it, did not fail on its own account, and is sent again
without counting a failure (docs/architecture.md, A storage outage).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

NEVER = datetime.min.replace(tzinfo=UTC)
# The longest recovery an outage earns, however long it was. A recovery is as long as its outage:
# listeners back off while storage is down, and the outage's backlog drains before new work
# gets through.
MAX_RECOVERY = timedelta(minutes=10)
# Gaps remembered: enough for an order deferred over several ticks of a paced recovery.
KEEP_GAPS = 20


@dataclass(frozen=True, order=True)
class Gap:
    start: datetime  # the last completed tick before it
    end: datetime  # the first tick after it

    @property
    def recovery(self) -> timedelta:
        # Before the first tick ever there was no outage to recover from, only no record.
        return timedelta(0) if self.start == NEVER else min(self.end - self.start, MAX_RECOVERY)

    def describe(self) -> str:
        """For a note on the order: the time before the first tick was no outage anyone saw."""
        if self.start == NEVER:
            return (f"before the Supervisor's first recorded tick ({self.end:%H:%M:%S}), when "
                    "nothing shows the pipeline working")
        return f"during an outage ({self.start:%H:%M:%S} to {self.end:%H:%M:%S})"

    def overlaps(self, start: datetime, end: datetime) -> bool:
        """Whether an attempt running from start to end met this outage or its recovery."""
        return self.start < end and start < self.end + self.recovery


@dataclass(frozen=True)
class TickLog:
    last_tick: datetime | None = None
    gaps: tuple[Gap, ...] = ()

    def after_tick(self, now: datetime, gap: timedelta) -> TickLog:
        """The record once a tick that started at ``now`` has completed."""
        gaps = self.gaps
        if self.last_tick is None:
            # No tick was ever recorded: nothing shows that anything could make progress.
            gaps = (Gap(NEVER, now),)
        elif now - self.last_tick > gap:
            gaps = (*gaps, Gap(self.last_tick, now))
        last = now if self.last_tick is None else max(now, self.last_tick)
        return TickLog(last, tuple(sorted(set(gaps)))[-KEEP_GAPS:])

    def with_gap(self, gap: Gap) -> TickLog:
        return TickLog(self.last_tick, tuple(sorted({*self.gaps, gap}))[-KEEP_GAPS:])

    def merge(self, other: TickLog) -> TickLog:
        """Two Supervisors' records of the same time: every gap either saw, the later tick."""
        ticks = [t for t in (self.last_tick, other.last_tick) if t is not None]
        return TickLog(max(ticks, default=None),
                       tuple(sorted(set(self.gaps) | set(other.gaps)))[-KEEP_GAPS:])

    def gap_during(self, start: datetime, end: datetime) -> Gap | None:
        return next((g for g in reversed(self.gaps) if g.overlaps(start, end)), None)

    def gaps_to_json(self) -> str:
        return json.dumps([[g.start.isoformat(), g.end.isoformat()] for g in self.gaps])

    @classmethod
    def from_parts(cls, last_tick: datetime | None, gaps_json: str | None) -> TickLog:
        gaps = tuple(Gap(datetime.fromisoformat(a), datetime.fromisoformat(b))
                     for a, b in json.loads(gaps_json or "[]"))
        return cls(last_tick, gaps)
