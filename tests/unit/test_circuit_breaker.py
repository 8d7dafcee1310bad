"""The circuit breaker: opens, refuses, half-opens for one trial, and never serialises calls."""

from __future__ import annotations

import math
import threading

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shared import circuit_breaker
from shared.circuit_breaker import CircuitBreaker, CircuitOpen
from tests.conftest import examples


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Boom(Exception):
    pass


class Refused(Exception):
    pass


def fail() -> None:
    raise Boom


def test_opens_after_consecutive_failures_and_then_does_not_call() -> None:
    clock = Clock()
    b = CircuitBreaker("svc", 3, 10, clock=clock)
    for _ in range(3):
        with pytest.raises(Boom):
            b.call(fail)
    assert b.state == "open"
    calls = []
    with pytest.raises(CircuitOpen):
        b.call(lambda: calls.append(1))
    assert calls == []


def test_a_mostly_healthy_service_does_not_trip_it() -> None:
    b = CircuitBreaker("svc", 3, 10, clock=Clock())
    for _ in range(5):  # a few failures in a clump, among many successes
        for _ in range(3):
            assert b.call(lambda: "ok") == "ok"
        with pytest.raises(Boom):
            b.call(fail)
    assert b.state == "closed"


def test_failures_that_dominate_trip_it_even_when_interleaved() -> None:
    b = CircuitBreaker("svc", 3, 10, clock=Clock())
    for _ in range(2):
        with pytest.raises(Boom):
            b.call(fail)
        assert b.call(lambda: "ok") == "ok"
    with pytest.raises(Boom):
        b.call(fail)  # 3 failures of the last 5 calls
    assert b.state == "open"


def test_half_open_allows_one_trial_that_closes_or_reopens() -> None:
    clock = Clock()
    b = CircuitBreaker("svc", 1, 10, clock=clock)
    with pytest.raises(Boom):
        b.call(fail)
    clock.t = 10
    assert b.state == "half-open"
    with pytest.raises(Boom):
        b.call(fail)  # the trial fails: open again, for another 10 s
    assert b.state == "open"
    clock.t = 20
    assert b.call(lambda: 1) == 1
    assert b.state == "closed"


def test_only_one_trial_at_a_time() -> None:
    clock = Clock()
    b = CircuitBreaker("svc", 1, 10, clock=clock)
    with pytest.raises(Boom):
        b.call(fail)
    clock.t = 10
    inside, release = threading.Event(), threading.Event()

    def slow_trial() -> str:
        inside.set()
        release.wait(5)
        return "ok"

    t = threading.Thread(target=lambda: b.call(slow_trial))
    t.start()
    assert inside.wait(5)
    with pytest.raises(CircuitOpen):
        b.call(lambda: "second")
    release.set()
    t.join(5)
    assert b.state == "closed"


def test_ignored_errors_do_not_count() -> None:
    b = CircuitBreaker("svc", 1, 10, ignore=(Refused,), clock=Clock())

    def refuse() -> None:
        raise Refused

    for _ in range(3):
        with pytest.raises(Refused):
            b.call(refuse)
    assert b.state == "closed"


def test_calls_run_side_by_side() -> None:
    b = CircuitBreaker("svc", 3, 10)
    both_inside = threading.Barrier(2, timeout=5)
    results: list[str] = []

    def call() -> None:
        results.append(b.call(lambda: (both_inside.wait(), "ok")[1]))

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == ["ok", "ok"]  # a breaker that serialised calls would break the barrier


class Flight:
    """Calls in flight side by side, each begun and ended when, and at the time, the test says."""

    def __init__(self, breaker: CircuitBreaker, clock: Clock) -> None:
        self.breaker, self.clock = breaker, clock
        self._calls: list[tuple[threading.Thread, threading.Event]] = []
        self.refused = 0

    def begin(self, at: float, *, fails: bool) -> int:
        self.clock.t = at
        inside, release = threading.Event(), threading.Event()

        def fn() -> str:
            inside.set()
            assert release.wait(5)
            if fails:
                raise Boom
            return "ok"

        def run() -> None:
            try:
                self.breaker.call(fn)
            except CircuitOpen:
                self.refused += 1
                inside.set()
            except Boom:
                pass

        t = threading.Thread(target=run)
        t.start()
        assert inside.wait(5)
        self._calls.append((t, release))
        return len(self._calls) - 1

    def end(self, call: int, at: float) -> None:
        self.clock.t = at
        thread, release = self._calls[call]
        release.set()
        thread.join(5)
        assert not thread.is_alive()


def run_timeline(flight: Flight, calls: list[tuple[float, float, bool]]) -> list[str]:
    """Begins and ends (begin, duration, fails) calls in time order; the state after each end."""
    events = sorted([(b, 1, i) for i, (b, _, _) in enumerate(calls)]
                    + [(b + d, 0, i) for i, (b, d, _) in enumerate(calls)])
    handles: dict[int, int] = {}
    states = []
    for at, is_begin, i in events:
        if is_begin:
            handles[i] = flight.begin(at, fails=calls[i][2])
        else:
            flight.end(handles[i], at)
            states.append(flight.breaker.state)
    return states


def test_hung_calls_that_time_out_after_traffic_thins_do_not_trip_it() -> None:
    # A service with 10% silent calls: each hung call fails when its 5 s timeout runs out, long
    # after the calls made beside it succeeded. When traffic stops, those late failures are all
    # that arrives; judged by arrival (the last 10 outcomes) they made half and opened it.
    clock = Clock()
    b = CircuitBreaker("svc", 5, 30, window_seconds=20, clock=clock)
    flight = Flight(b, clock)
    calls = [(i / 10, 5.0 if i % 10 == 9 else 0.05, i % 10 == 9) for i in range(200)]
    states = run_timeline(flight, calls)
    assert set(states) == {"closed"} and flight.refused == 0


def test_a_service_whose_calls_all_hang_trips_it_even_if_they_outlive_the_window() -> None:
    clock = Clock()
    b = CircuitBreaker("svc", 5, 30, window_seconds=2, clock=clock)
    states = run_timeline(Flight(b, clock), [(i / 10, 5.0, True) for i in range(5)])
    assert states == ["closed"] * 4 + ["open"]


def test_failures_older_than_the_window_are_forgotten() -> None:
    clock = Clock()
    b = CircuitBreaker("svc", 5, 30, window_seconds=20, clock=clock)
    for t in (0, 1, 2, 3):
        clock.t = t
        with pytest.raises(Boom):
            b.call(fail)
    clock.t = 30
    with pytest.raises(Boom):
        b.call(fail)  # the fifth failure, but the only one in the last 20 s
    assert b.state == "closed"
    for t in (31, 32, 33, 34):
        clock.t = t
        with pytest.raises(Boom):
            b.call(fail)
    assert b.state == "open"


SLOT = 0.125  # a power of two: slot arithmetic on the times below is exact
WINDOW, THRESHOLD = SLOT * circuit_breaker.SLOTS, 3


@settings(max_examples=examples(500), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(1, 60), st.booleans()),
                min_size=1, max_size=30))
# Judged by when outcomes arrive, the first failure would still be in the window at the third.
@example([(0, 19, True), (22, 1, True), (2, 1, True)])
def test_it_first_opens_exactly_when_half_the_calls_begun_in_the_window_failed(
        steps: list[tuple[int, int, bool]]) -> None:
    # Calls begin at whole slots, so the window's slots hold exactly the calls the rule speaks
    # of; they end in any order. The rule, read plainly: when a call fails, of the calls that
    # began in the WINDOW's slots up to now (one that outlived them counted as of now) and have
    # ended, at least THRESHOLD failed and at least half.
    calls, begin = [], 0
    for gap, duration, fails in steps:
        begin += gap
        calls.append((begin * SLOT, duration * SLOT, fails))
    clock = Clock()
    states = run_timeline(Flight(CircuitBreaker("svc", THRESHOLD, 1000, window_seconds=WINDOW,
                                                clock=clock), clock), calls)
    ends = sorted(range(len(calls)), key=lambda i: (calls[i][0] + calls[i][1], i))
    expected, ended = [], []
    for i in ends:
        b, d, fails = calls[i]
        now = b + d
        slot = math.floor(now / SLOT)
        oldest = slot - circuit_breaker.SLOTS + 1
        ended.append((b / SLOT if b / SLOT >= oldest else slot, fails))
        ended = [(s, f) for s, f in ended if s >= oldest]
        failures = sum(f for _, f in ended)
        opened = fails and failures >= THRESHOLD and 2 * failures >= len(ended)
        expected.append("open" if opened or "open" in expected else "closed")
    first = expected.index("open") if "open" in expected else len(expected)
    assert states[:first + 1] == expected[:first + 1]
