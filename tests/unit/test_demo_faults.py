"""The demo's hangs: named orders, each hanging once in one step, so that every run shows about
as many timeouts and none of its orders waits out two hung calls."""

from __future__ import annotations

import re
from collections import Counter

from localrun.demo import hung_once
from orderctl.samples import sample_orders
from shared.domain.workflow_message import ORDER_ID_PATTERN
from shared.handlers.simulated_service import HANG_PREFIX
from shared.workflows import REGISTRY


def services_of(order: dict[str, object]) -> list[str]:
    workflow = order.get("workflow")
    return [s.service for s in REGISTRY.get(workflow if isinstance(workflow, str) else None)
            .steps]


def hung_service(order_id: str) -> str | None:
    if not order_id.startswith(HANG_PREFIX):
        return None
    return order_id.removeprefix(HANG_PREFIX).split("-", 1)[0]


def test_one_order_in_twenty_hangs_once_the_services_taking_turns() -> None:
    batch = list(sample_orders(100, seed=1))
    named = hung_once(batch, 0.05)
    hung = [o for o in named if o["order_id"].startswith(HANG_PREFIX)]
    services = services_of(batch[0])
    assert [hung_service(o["order_id"]) for o in hung] == [services[n % len(services)]
                                                          for n in range(5)]
    # Only the ids change, each into a valid id that still names its order; no two collide.
    assert [{k: v for k, v in o.items() if k != "order_id"} for o in named] == \
        [{k: v for k, v in o.items() if k != "order_id"} for o in batch]
    assert all(n["order_id"].endswith(b["order_id"]) for n, b in zip(named, batch, strict=True))
    assert len({o["order_id"] for o in named}) == 100
    assert all(re.match(ORDER_ID_PATTERN, o["order_id"]) for o in named)
    assert all(o["order_id"].startswith("ord-") for o in batch)  # the batch given is untouched


def test_each_named_order_calls_the_service_it_hangs_in_whatever_the_workflows() -> None:
    batch = list(sample_orders(40, seed=2, workflows=sorted(REGISTRY.names)))
    named = hung_once(batch, 0.25)
    hung = Counter(hung_service(o["order_id"]) for o in named
                   if o["order_id"].startswith(HANG_PREFIX))
    every = {s for o in batch for s in services_of(o)}
    assert sum(hung.values()) == 10 and set(hung) == every
    for o in named:
        if (service := hung_service(o["order_id"])) is not None:
            assert service in services_of(o)


def test_no_faults_no_hangs_and_a_small_batch_still_shows_one() -> None:
    batch = list(sample_orders(5, seed=3))
    assert hung_once(batch, 0) == batch
    assert sum(o["order_id"].startswith(HANG_PREFIX) for o in hung_once(batch, 0.05)) == 1


def test_the_orders_named_to_hang_are_the_first_sent() -> None:
    named = hung_once(list(sample_orders(100, seed=4)), 0.05)
    assert [o["order_id"].startswith(HANG_PREFIX) for o in named[:6]] == [True] * 5 + [False]


def test_one_in_twenty_rounds_up() -> None:
    for count, hung in ((50, 3), (90, 5), (19, 1), (21, 2)):
        named = hung_once(list(sample_orders(count, seed=5)), 0.05)
        assert sum(o["order_id"].startswith(HANG_PREFIX) for o in named) == hung, count
