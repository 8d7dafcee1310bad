"""How the local host's listeners ask a Storage queue for messages: one Get Messages request
when there is room, a randomised exponential back-off after an empty one (as the queue
listener's), and the Service Bus stand-in's short fixed interval."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from azure.core.exceptions import ResourceExistsError
from azure.storage.queue import QueueClient

log = logging.getLogger("localrun.host")


def queue_batches(batch_size: int, new_batch_threshold: int) -> Callable[[int], int]:
    """The queue listener's rule: ask for ``batchSize`` messages, and ask again only once the
    invocations in flight are down to ``newBatchThreshold`` (so at most the sum run at once)."""
    return lambda in_flight: batch_size if in_flight <= new_batch_threshold else 0


def up_to(max_concurrent_calls: int) -> Callable[[int], int]:
    """The Service Bus message pump's: as many as ``maxConcurrentCalls`` leaves room for (a
    Storage queue, the local channel, gives at most 32 a request)."""
    return lambda in_flight: min(32, max_concurrent_calls - in_flight)


# The queue listener's shortest wait after an empty poll (QueuePollingIntervals.Minimum).
MIN_POLLING_INTERVAL = 0.1
# The Service Bus trigger's receiver holds an AMQP link open and the broker pushes each message as
# it arrives: no polling interval. The stand-in, a Storage queue, comes closest by asking at a
# short fixed interval, idle or not. Its requests are not storage transactions (the meter keeps
# them apart); they cost this machine about 20 requests a second to Azurite while idle.
SERVICE_BUS_POLL_SECONDS = 0.05


class ListenerBackoff:
    """How long the queue listener waits after a poll that found nothing (its randomised
    exponential back-off): the minimum if messages came since the last wait, then the minimum
    plus 1, 2, 4... times it, each ±20% at random, until that reaches ``maximum``
    (``maxPollingInterval``), which it then keeps."""

    JITTER = 0.2

    def __init__(self, maximum: float, minimum: float = MIN_POLLING_INTERVAL,
                 uniform: Callable[[float, float], float] = random.uniform) -> None:
        # The host refuses a minimum above the maximum; a test's short maximum lowers both.
        self.minimum, self.maximum = min(minimum, maximum), maximum
        self._uniform = uniform
        self._current = 0.0
        self._exponent = 0

    def next_delay(self, found_since_last: bool) -> float:
        if found_since_last:
            self._current, self._exponent = self.minimum, 1
        elif self._current != self.maximum:
            interval = self.minimum
            if self._exponent > 0:
                interval += (self._uniform(1 - self.JITTER, 1 + self.JITTER)
                             * 2 ** (self._exponent - 1) * self.minimum)
            if interval < self.maximum:
                self._current, self._exponent = interval, self._exponent + 1
            else:
                self._current = self.maximum
        return self._current


def poll_loop(receive: Callable[[int], list[Any]], handle: Callable[[Any], None],
              ask: Callable[[int], int], *, listener: ThreadPoolExecutor,
              stop: threading.Event, max_delay: float,
              wake: threading.Event | None = None) -> None:
    """A listener's polling loop: one receive request when ``ask`` allows one, each message
    handled on ``listener``; after an empty receive, wait as the listener does
    (ListenerBackoff, up to ``max_delay``), or until ``wake`` is set (the shared queue
    watcher's notice). A notice that comes while a receive is under way ends the wait that
    follows it, as the listener's does; its owner sets ``wake`` when it sets ``stop``."""
    room = threading.Condition()
    in_flight = 0
    backoff = ListenerBackoff(max_delay, minimum=MIN_POLLING_INTERVAL)
    found = False
    wait = (wake or stop).wait

    def run(m: Any) -> None:
        nonlocal in_flight
        try:
            handle(m)
        finally:
            with room:
                in_flight -= 1
                room.notify()

    while not stop.is_set():
        with room:
            n = ask(in_flight)
            if n <= 0:
                room.wait(timeout=0.2)
                continue
        if wake is not None:
            wake.clear()
        try:
            messages = receive(n)
        except Exception:
            log.exception("receive failed")
            messages = []
        if not messages:
            wait(backoff.next_delay(found))
            found = False
            continue
        found = True
        with room:
            in_flight += len(messages)
        for m in messages:
            listener.submit(run, m)


def receiver(queue: QueueClient, lease: float) -> Callable[[int], list[Any]]:
    """One Get Messages request for up to n messages, each invisible to other hosts for
    ``lease`` seconds. (The SDK's pager, asked for n, would ask again after a short page: an
    empty request per poll that the host does not make.)"""

    def receive(n: int) -> list[Any]:
        pages = queue.receive_messages(messages_per_page=n,
                                       visibility_timeout=int(lease)).by_page()
        return list(next(pages, []))

    return receive


def ensure_queue(q: QueueClient) -> None:
    with contextlib.suppress(ResourceExistsError):
        q.create_queue()
