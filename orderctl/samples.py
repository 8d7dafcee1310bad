"""Sample orders for demos and load: plausible, valid, reproducible with a seed."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CATALOGUE = [("SKU-TEA", "4.50"), ("SKU-MUG", "12.00"), ("SKU-KETTLE", "39.90"),
             ("SKU-BEANS", "9.75"), ("SKU-FILTER", "2.20"), ("SKU-GRINDER", "64.00")]


def sample_orders(count: int, prefix: str = "ord", seed: int | None = None,
                  reply_to: str | None = None,
                  workflows: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """``workflows``: each order names one of these in turn (None: the app's default)."""
    rng = random.Random(seed)
    run = uuid.UUID(int=rng.getrandbits(128)).hex[:6] if seed is not None else uuid.uuid4().hex[:6]
    for i in range(count):
        items = [{"sku": sku, "quantity": rng.randint(1, 3), "unit_price": price}
                 for sku, price in rng.sample(CATALOGUE, rng.randint(1, 3))]
        order: dict[str, Any] = {"order_id": f"{prefix}-{run}-{i:05d}",
                                 "customer_id": f"cust-{rng.randint(1, 500):04d}", "items": items}
        if reply_to:
            order["reply_to"] = reply_to
        if workflows:
            order["workflow"] = workflows[i % len(workflows)]
        yield order


def orders_from_file(path: Path) -> Iterator[tuple[str | None, bytes]]:
    """JSON lines: (order id if the line has one, the line as sent). Bad lines are sent too:
    intake records them with the reason, which is what the operator wants to see."""
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            oid = doc.get("order_id") if isinstance(doc, dict) else None
        except ValueError:
            oid = None
        yield (oid if isinstance(oid, str) else None), line.encode()
