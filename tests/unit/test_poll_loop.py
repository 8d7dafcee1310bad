"""The local host's listeners ask for messages as the Functions host's do: a queue listener asks
for ``batchSize`` and asks again only once its invocations in flight are down to
``newBatchThreshold``; the Service Bus stand-in asks for what ``maxConcurrentCalls`` leaves; an
empty poll is followed by the listener's back-off, which the shared queue watcher's notice ends."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from localrun.host import polling
from localrun.host.polling import ListenerBackoff, poll_loop, queue_batches, up_to
from tests.conftest import wait_until


def test_the_rules_for_how_many_to_ask_for() -> None:
    batches = queue_batches(batch_size=4, new_batch_threshold=2)
    assert [batches(n) for n in range(7)] == [4, 4, 4, 0, 0, 0, 0]
    pump = up_to(16)
    assert [pump(0), pump(10), pump(16)] == [16, 6, 0]
    assert up_to(100)(0) == 32  # a Storage queue gives at most 32 a request


def test_a_queue_listener_asks_for_a_batch_and_again_only_at_the_new_batch_threshold() -> None:
    backlog = list(range(10))
    lock = threading.Lock()
    asks: list[tuple[int, int]] = []  # (messages asked for, invocations in flight then)
    handed = finished = 0
    started: list[int] = []
    release = {m: threading.Event() for m in backlog}
    running = peak = 0

    def receive(n: int) -> list[int]:
        nonlocal handed
        with lock:
            asks.append((n, handed - finished))
            got, backlog[:n] = backlog[:n], []
            handed += len(got)
            return got

    def handle(m: int) -> None:
        nonlocal finished, running, peak
        with lock:
            started.append(m)
            running += 1
            peak = max(peak, running)
        release[m].wait(timeout=30)
        with lock:
            running -= 1
            finished += 1

    stop = threading.Event()
    listener = ThreadPoolExecutor(max_workers=6)
    loop = threading.Thread(target=poll_loop, args=(receive, handle, queue_batches(4, 2)),
                            kwargs={"listener": listener, "stop": stop, "max_delay": 0.05})
    loop.start()
    try:
        wait_until(lambda: len(started) == 4, timeout=10, message="the first batch")
        # Four in flight, above the threshold: no second request (it could only come after a
        # release, which has not happened).
        assert asks == [(4, 0)]
        release[0].set()
        wait_until(lambda: finished == 1, timeout=10, message="one done")
        assert asks == [(4, 0)]  # three in flight: still above it
        release[1].set()
        wait_until(lambda: len(started) == 8, timeout=10, message="the second batch")
        assert asks == [(4, 0), (4, 2)]
        assert peak == 6  # batchSize + newBatchThreshold, no more
        for e in release.values():
            e.set()
        wait_until(lambda: finished == 10, timeout=10, message="all done")
        wait_until(lambda: len(asks) >= 4, timeout=10, message="an empty poll")
    finally:
        stop.set()
        loop.join(timeout=10)
        listener.shutdown()
    assert not loop.is_alive()
    assert all(n == 4 for n, _ in asks)  # never more than the batch
    assert sorted(started) == list(range(10))  # each message handled once


def test_after_an_empty_poll_the_listener_waits_as_the_host_does() -> None:
    # Without the randomness (the middle of its range): 100 ms, then 100 ms plus 1, 2, 4...
    # times 100 ms, up to maxPollingInterval, where it stays.
    b = ListenerBackoff(maximum=2.0, uniform=lambda lo, hi: (lo + hi) / 2)
    waits = [round(b.next_delay(found_since_last=False), 3) for _ in range(8)]
    assert waits == [0.1, 0.2, 0.3, 0.5, 0.9, 1.7, 2.0, 2.0]
    # Messages since the last wait: back to the shortest, and up again from there.
    assert b.next_delay(found_since_last=True) == 0.1
    assert round(b.next_delay(found_since_last=False), 3) == 0.2


def test_the_listener_back_off_is_randomised_by_a_fifth_either_way() -> None:
    low = ListenerBackoff(maximum=60.0, uniform=lambda lo, hi: lo)
    high = ListenerBackoff(maximum=60.0, uniform=lambda lo, hi: hi)
    assert [round(low.next_delay(False), 3) for _ in range(4)] == [0.1, 0.18, 0.26, 0.42]
    assert [round(high.next_delay(False), 3) for _ in range(4)] == [0.1, 0.22, 0.34, 0.58]
    # A maximum below the host's minimum (tests poll fast) lowers the minimum with it.
    fast = ListenerBackoff(maximum=0.05)
    assert {fast.next_delay(False) for _ in range(5)} == {0.05}


def test_a_notice_from_the_shared_queue_watcher_ends_the_listeners_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Every wait 30 s long: a receive that comes sooner was woken by the notice.
    monkeypatch.setattr(polling, "MIN_POLLING_INTERVAL", 30.0)
    calls: list[int] = []
    in_receive, finish_receive = threading.Event(), threading.Event()

    def receive(n: int) -> list[int]:
        calls.append(n)
        if len(calls) == 2:  # the second receive is under way when the next notice comes
            in_receive.set()
            finish_receive.wait(timeout=30)
        return []

    stop, wake = threading.Event(), threading.Event()
    listener = ThreadPoolExecutor(max_workers=1)
    loop = threading.Thread(target=poll_loop, args=(receive, lambda m: None, up_to(1)),
                            kwargs={"listener": listener, "stop": stop, "max_delay": 60.0,
                                    "wake": wake})
    loop.start()
    try:
        wait_until(lambda: len(calls) == 1, timeout=10, message="the first poll")
        wake.set()  # waiting, or about to: either way the wait ends at once
        wait_until(in_receive.is_set, timeout=10, message="a poll right after the notice")
        wake.set()  # during a receive: the wait after it ends at once too
        finish_receive.set()
        wait_until(lambda: len(calls) == 3, timeout=10, message="a poll after that receive")
    finally:
        stop.set()
        wake.set()  # the host sets both when it stops
        loop.join(timeout=10)
        listener.shutdown()
    assert not loop.is_alive()  # stopped in the middle of a 30 s wait
