"""A service's limit on Azurite, as deployed: two instances (each its own table client and
view of the record) with several calls in flight each, on the wall clock. What the service
sees: never more calls at once than ``at_once``, never more begun in a second than
``per_second`` (a call begins at its grant's start, or as late as its thread wakes)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from azure.data.tables import TableServiceClient

from shared.adapters.limits import NoSlot, ServiceLimiter, TableLimits
from shared.domain.limits import Limit

CALLS = 60


def test_two_instances_calls_stay_within_the_limit_together(
        app_env: Callable[..., dict[str, str]]) -> None:
    env = app_env()
    limit = Limit(at_once=3, per_second=25)
    service = f"beta{random.randrange(10**6)}"

    def instance(name: str) -> ServiceLimiter:
        tables = TableServiceClient.from_connection_string(env["AzureWebJobsStorage"])
        return ServiceLimiter(service, limit, TableLimits(
            tables.get_table_client(env["InFlightTableName"])), instance=name)

    limiters = [instance("a"), instance("b")]
    seen: list[tuple[float, float]] = []
    refused: list[str] = []
    lock = threading.Lock()
    todo = iter(range(CALLS))

    def caller(limiter: ServiceLimiter, rng: random.Random) -> None:
        while True:
            with lock:
                if next(todo, None) is None:
                    return
            try:
                grant = limiter.acquire(time.time() + 30, 5)
            except NoSlot as e:
                refused.append(str(e))
                continue
            began = time.time()
            time.sleep(rng.uniform(0.0, 0.15))  # the provider's work
            ended = time.time()
            limiter.release(grant)
            with lock:
                seen.append((began, ended))

    threads = [threading.Thread(target=caller, args=(limiters[i % 2], random.Random(i)))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert refused == [] and len(seen) == CALLS
    events = sorted([(b, 1) for b, _ in seen] + [(e, -1) for _, e in seen])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= 3
    starts = sorted(b for b, _ in seen)
    in_a_second = max(sum(1 for s in starts if b <= s < b + 1) for b in starts)
    assert in_a_second <= 25 + 1  # a thread that wakes late brings its call nearer the next
    assert peak == 3, "the calls never reached the limit: this test would not see it broken"
