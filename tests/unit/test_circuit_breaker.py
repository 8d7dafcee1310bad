"""The circuit breaker: opens, refuses, half-opens for one trial, and never serialises calls."""

from __future__ import annotations

import threading

import pytest

from shared.circuit_breaker import CircuitBreaker, CircuitOpen


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
