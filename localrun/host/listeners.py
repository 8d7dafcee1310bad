"""The local host's queue, Service Bus and timer triggers: a listener for each (see
polling.py), the lease on each message it received, renewed while the message's function
runs, and the message settled by how the invocation ended; and the shared queue watcher, whose
notice wakes the listener on a queue an output binding sent to.

TriggerListeners is a part of LocalFunctionHost (host.py), which sets the state it names.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from azure.storage.queue import QueueClient, QueueServiceClient
from croniter import croniter

from localrun.host import triggers
from localrun.host.config import HostConfigError, QueueOptions, ServiceBusOptions
from localrun.host.index import IndexedFunction as _Function
from localrun.host.polling import (
    SERVICE_BUS_POLL_SECONDS,
    ensure_queue,
    poll_loop,
    queue_batches,
    receiver,
    up_to,
)
from localrun.host.state import HostStats, HostStopping
from localrun.host.triggers import TriggerData
from localrun.servicebus import LocalServiceBusChannel, ServiceBusEnvelope

log = logging.getLogger("localrun.host")


@dataclass
class Held:
    """A received message this host is working on, and the lease it keeps renewing."""

    queue: QueueClient
    message: Any
    lease: float
    renew_until: float
    next_renewal: float
    lock: threading.Lock = field(default_factory=threading.Lock)


class MessageLog:
    """Appends {"queue", "function", "body"} lines; one write per line, so lines stay whole
    between threads (a killed process may leave its last line cut short)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, queue: str, function: str, body: bytes) -> None:
        line = json.dumps({"queue": queue, "function": function,
                           "body": body.decode("utf-8", errors="replace")})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


class TriggerListeners:
    """The host's side of its queue, Service Bus and timer triggers."""

    # Set by LocalFunctionHost.__init__.
    stats: HostStats
    queue_options: QueueOptions
    service_bus_options: ServiceBusOptions
    _queues: QueueServiceClient
    _record: MessageLog | None
    _poll_max: float
    _lease: float
    _lock: float
    _max_delivery: int
    _stop: threading.Event
    _leases: dict[int, Held]
    _leases_lock: threading.Lock
    _listeners: list[ThreadPoolExecutor]
    _watchers: dict[str, list[threading.Event]]
    _watchers_lock: threading.Lock

    if TYPE_CHECKING:
        def run(self, f: _Function, trigger: TriggerData) -> Any: ...

        def resolve(self, value: str) -> str: ...

    # -- the shared queue watcher ------------------------------------------------------------

    def _watch(self, queue: str) -> threading.Event:
        wake = threading.Event()
        with self._watchers_lock:
            self._watchers.setdefault(queue, []).append(wake)
            if self._stop.is_set():
                wake.set()
        return wake

    def _notify(self, queue: str) -> None:
        with self._watchers_lock:
            wakes = list(self._watchers.get(queue, ()))
        for wake in wakes:
            wake.set()

    # -- listening ---------------------------------------------------------------------------

    def _poll(self, receive: Callable[[int], list[Any]], handle: Callable[[Any], None],
              ask: Callable[[int], int], workers: int, max_delay: float | None = None,
              wake: threading.Event | None = None) -> None:
        # The host's side of each message (receive, renew, settle) is its own; only the
        # invocation itself takes a thread of the worker's shared pool (run()).
        listener = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="listener")
        self._listeners.append(listener)

        def handled(m: Any) -> None:  # the message's whole handling, its settle included
            with self.stats.working():
                handle(m)

        poll_loop(receive, handled, ask, listener=listener, stop=self._stop,
                  max_delay=max_delay or self._poll_max, wake=wake)

    # -- leases ------------------------------------------------------------------------------

    def _hold(self, queue: QueueClient, m: Any, lease: float, renew_for: float) -> Held:
        now = time.monotonic()
        held = Held(queue, m, lease, renew_until=now + renew_for, next_renewal=now + lease / 2)
        with self._leases_lock:
            self._leases[id(held)] = held
        return held

    def _settle(self, held: Held, visible_after: float | None) -> None:
        """Delete the message (``None``) or make it visible again after so many seconds."""
        with self._leases_lock:
            self._leases.pop(id(held), None)
        with held.lock:
            if visible_after is None:
                held.queue.delete_message(held.message)
            else:
                held.queue.update_message(held.message, visibility_timeout=int(visible_after))

    def _abandon(self, held: Held) -> None:
        """Leave the message as it is: it comes back when its lease runs out (a host that stops
        before it runs a message it received does not settle it either)."""
        with self._leases_lock:
            self._leases.pop(id(held), None)

    def _renew_leases(self) -> None:
        # The host's renewal timer: at half the lease, extend it by a whole lease, for as long as
        # the function runs (Service Bus: up to maxAutoLockRenewalDuration).
        while not self._stop.wait(0.5):
            now = time.monotonic()
            with self._leases_lock:
                due = [h for h in self._leases.values()
                       if h.next_renewal <= now < h.renew_until]
            for h in due:
                with h.lock:
                    if id(h) not in self._leases:
                        continue
                    try:
                        r = h.queue.update_message(h.message, visibility_timeout=int(h.lease))
                    except Exception:
                        log.warning("could not renew the lease on message %s", h.message.id,
                                    exc_info=True)
                        continue
                    h.message.pop_receipt = r.pop_receipt
                    h.message.next_visible_on = r.next_visible_on
                    h.next_renewal = time.monotonic() + h.lease / 2

    # -- queue trigger -----------------------------------------------------------------------

    def _queue_loop(self, f: _Function) -> None:
        opts = self.queue_options
        queue = self._queues.get_queue_client(self.resolve(f.trigger["queueName"]))
        poison = self._queues.get_queue_client(queue.queue_name + "-poison")
        ensure_queue(queue)

        receive = receiver(queue, self._lease)

        def handle(m: Any) -> None:
            held = self._hold(queue, m, self._lease, renew_for=float("inf"))
            try:
                body = base64.b64decode(m.content, validate=True) if opts.base64 \
                    else m.content.encode()
            except (binascii.Error, ValueError):
                body = None
            try:
                if body is None:
                    raise ValueError("message is not valid base64 (host messageEncoding)")
                if self._record:
                    self._record.write(queue.queue_name, f.name, body)
                self.run(f, TriggerData(triggers.queue_message, dict(
                    function=f.name, body=body, id=m.id, dequeue_count=m.dequeue_count,
                    inserted_on=m.inserted_on, expires_on=m.expires_on,
                    next_visible_on=m.next_visible_on, pop_receipt=m.pop_receipt)))
            except HostStopping:
                self._abandon(held)
                return
            except Exception:
                if m.dequeue_count >= opts.max_dequeue_count:
                    ensure_queue(poison)
                    poison.send_message(m.content)
                    self._settle(held, None)
                    with self.stats._lock:
                        self.stats.poisoned += 1
                    log.error("%s: message %s moved to %s", f.name, m.id, poison.queue_name)
                else:
                    self._settle(held, opts.visibility_timeout)
                return
            self._settle(held, None)

        self._poll(receive, handle, queue_batches(opts.batch_size, opts.new_batch_threshold),
                   opts.batch_size + opts.new_batch_threshold, wake=self._watch(queue.queue_name))

    # -- Service Bus trigger -----------------------------------------------------------------

    def _service_bus_loop(self, f: _Function) -> None:
        channel = LocalServiceBusChannel(self._queues, self.resolve(f.trigger["queueName"]))
        channel.ensure()
        queue = channel.queue
        opts = self.service_bus_options

        receive = receiver(queue, self._lock)

        def handle(m: Any) -> None:
            held = self._hold(queue, m, self._lock, renew_for=opts.max_auto_lock_renewal)
            try:
                env = ServiceBusEnvelope.parse(m.content)
                if self._record:
                    self._record.write(channel.orders_queue, f.name, env.body)
                self.run(f, TriggerData(triggers.service_bus_message, dict(
                    function=f.name, body=env.body, message_id=env.message_id,
                    content_type=env.content_type,
                    application_properties=env.application_properties,
                    delivery_count=m.dequeue_count, sequence_number=env.sequence_number,
                    enqueued=env.enqueued_time_utc, time_to_live=env.time_to_live,
                    lock_token=m.pop_receipt,
                    locked_until=datetime.now(UTC) + timedelta(seconds=self._lock))))
            except HostStopping:
                self._abandon(held)
                return
            except Exception:
                if m.dequeue_count >= self._max_delivery:
                    envelope = json.loads(m.content)
                    envelope["dead_letter_reason"] = "MaxDeliveryCountExceeded"
                    channel.deadletter.send_message(json.dumps(envelope))
                    self._settle(held, None)
                    with self.stats._lock:
                        self.stats.dead_lettered += 1
                else:
                    # Service Bus redelivers an abandoned message at once.
                    self._settle(held, 0)
                return
            self._settle(held, None)

        self._poll(receive, handle, up_to(opts.max_concurrent_calls),
                   opts.max_concurrent_calls,
                   max_delay=min(self._poll_max, SERVICE_BUS_POLL_SECONDS))

    # -- timer trigger -----------------------------------------------------------------------

    def _timer_loop(self, f: _Function) -> None:
        schedule = self.resolve(f.trigger["schedule"])
        if len(schedule.split()) != 6:
            raise HostConfigError(f"{f.name}: schedule {schedule!r} is not six-field NCRONTAB")
        it = croniter(schedule, datetime.now(UTC), second_at_beginning=True)
        last: datetime | None = None
        while not self._stop.is_set():
            due: datetime = it.get_next(datetime)
            wait = (due - datetime.now(UTC)).total_seconds()
            if wait > 0 and self._stop.wait(wait):
                return
            past_due = (datetime.now(UTC) - due) > timedelta(seconds=5)
            request = TriggerData(triggers.timer_request, dict(
                past_due=past_due, last=last,
                next=croniter(schedule, due, second_at_beginning=True).get_next(datetime)))
            # A failed run is logged (call()); like the host, wait for the next occurrence.
            with contextlib.suppress(Exception):
                self.run(f, request)
            last = due
