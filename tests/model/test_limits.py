"""A service's limit across instances, searched for counter-examples.

A hypothesis state machine drives several instances' limiters (adapters/limits.ServiceLimiter)
over one shared record, each with its own view of it, as deployed: calls asking for a grant at
any time with any deadline, calls ending in any order, instances dying with their leases held
and coming back with no view, the service asking for a wait, the store failing, and time
passing. After every step: no more calls run at once than the limit's ``at_once``, no two
calls begin closer together than its rate allows, and none begins inside a wait the service
asked for.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

from azure.core.exceptions import ServiceRequestError
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shared.adapters.limits import NoSlot, ServiceLimiter
from shared.domain.limits import Limit
from tests.fakes import FakeLimits

INSTANCES = 3
EPSILON = 1e-6


@dataclass
class Running:
    instance: int
    start: float
    ends: float  # the call's deadline: it runs no longer
    grant: object


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


class LimitSearch(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.down = False
        self.store = FakeLimits(fault=self._fault)
        self.limit: Limit | None = None
        self.limiters: list[ServiceLimiter] = []
        self.running: list[Running] = []
        self.starts: list[float] = []
        self.slowed_until = 0.0  # the latest wait the service asked for that was written
        self.dead: list[Running] = []
        self.lives = 0  # calls of instances that died, perhaps still running

    def _fault(self, what: str) -> None:
        if self.down:
            raise ServiceRequestError(f"storage down: {what}")

    def _limiter(self, instance: int) -> ServiceLimiter:
        assert self.limit is not None
        # A new process each life, as a restarted instance is: its leases are its own.
        self.lives += 1
        return ServiceLimiter("beta", self.limit, self.store, now=self.clock,
                              sleep=self.clock.sleep, instance=f"i{instance}.{self.lives}",
                              background=lambda release: release())

    @precondition(lambda self: self.limit is None)
    @rule(at_once=st.one_of(st.none(), st.integers(1, 4)),
          per_second=st.one_of(st.none(), st.sampled_from([0.5, 2.0, 7.0, 50.0])))
    def declare(self, at_once: int | None, per_second: float | None) -> None:
        self.limit = Limit(at_once=at_once, per_second=per_second) if (
            at_once or per_second) else Limit(at_once=2)
        self.limiters = [self._limiter(i) for i in range(INSTANCES)]

    @precondition(lambda self: self.limit is not None)
    @rule(instance=st.integers(0, INSTANCES - 1),
          deadline=st.floats(0.01, 8.0), longest=st.floats(0.01, 4.0))
    def a_call_asks(self, instance: int, deadline: float, longest: float) -> None:
        asked_at = self.clock.now
        try:
            got = self.limiters[instance].acquire(asked_at + deadline, longest)
        except NoSlot:
            assert self.clock.now <= asked_at + deadline + EPSILON
            return
        except ServiceRequestError:
            return  # the message is delivered again; nothing was granted
        assert got.start <= self.clock.now + EPSILON, "a call began before its start"
        assert got.start < asked_at + deadline, "a grant starts past the call's deadline"
        assert got.start + EPSILON >= self.slowed_until, "a call began in an asked-for wait"
        self.starts.append(got.start)
        self.running.append(Running(instance, got.start, got.start + longest, got))

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def a_call_ends(self, data: st.DataObject) -> None:
        call = self.running.pop(data.draw(st.integers(0, len(self.running) - 1)))
        self.limiters[call.instance].release(call.grant)  # type: ignore[arg-type]

    @precondition(lambda self: self.limit is not None)
    @rule(instance=st.integers(0, INSTANCES - 1))
    def an_instance_dies(self, instance: int) -> None:
        # Its calls end with it, their leases still held; a new instance comes with no view.
        self.dead += [c for c in self.running if c.instance == instance]
        self.running = [c for c in self.running if c.instance != instance]
        self.limiters[instance] = self._limiter(instance)

    @precondition(lambda self: self.limit is not None)
    @rule(instance=st.integers(0, INSTANCES - 1),
          seconds=st.one_of(st.none(), st.floats(0.0, 20.0)))
    def the_service_asks_for_a_wait(self, instance: int, seconds: float | None) -> None:
        before = self.store.writes
        self.limiters[instance].slow(seconds, "HTTP 429")
        state = self.store.records.get("beta")
        if state is not None and self.store.writes > before:
            self.slowed_until = max(self.slowed_until, state[0].slow_until)

    @rule(seconds=st.floats(0.0, 6.0))
    def time_passes(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule(down=st.booleans())
    def the_store(self, down: bool) -> None:
        self.down = down

    @invariant()
    def no_more_at_once_than_the_limit(self) -> None:
        if self.limit is None or self.limit.at_once is None:
            return
        now = self.clock.now
        # Running now: begun, not ended, not past its deadline (live or dead instance alike:
        # a dead instance's call may still be running at the service).
        calls = [c for c in [*self.running, *self.dead]
                 if c.start <= now < c.ends]
        assert len(calls) <= self.limit.at_once, (
            f"{len(calls)} calls at once, limit {self.limit.at_once}")

    @invariant()
    def no_two_starts_closer_than_the_rate(self) -> None:
        if self.limit is None or self.limit.per_second is None:
            return
        ordered = sorted(self.starts)
        gaps = [b - a for a, b in itertools.pairwise(ordered)]
        assert all(g + EPSILON >= self.limit.spacing for g in gaps), (
            f"starts {min(gaps):.4f}s apart, limit {self.limit.per_second}/s")


LimitSearch.TestCase.settings = settings(
    max_examples=int(os.environ.get("LIMIT_EXAMPLES", "300")), stateful_step_count=40,
    deadline=None)
TestLimitSearch = LimitSearch.TestCase
