"""Sample orders for demos and load: plausible, valid, reproducible with a seed."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shared.domain.workflow import Registry
from shared.workflows import REGISTRY


class NoSamples(ValueError):
    """A workflow whose message model gives no sample orders (WorkflowMessage.sample)."""


def sample_orders(count: int, prefix: str = "ord", seed: int | None = None,
                  reply_to: str | None = None, workflows: list[str] | None = None,
                  registry: Registry | None = None) -> Iterator[dict[str, Any]]:
    """``workflows``: each order names one of these in turn (None: the app's default). Each
    order's own fields are its workflow's message model's sample. ``registry``: the app's."""
    registry = registry or REGISTRY
    chosen = [registry.get(w) for w in workflows] if workflows else [registry.get()]
    if missing := unsampled(workflows, registry):  # before the first order: none half sent
        raise NoSamples(f"workflow {', '.join(missing)} gives no sample orders (its message "
                        "model's sample()): send its orders from a file of JSON lines")
    rng = random.Random(seed)
    run = uuid.UUID(int=rng.getrandbits(128)).hex[:6] if seed is not None else uuid.uuid4().hex[:6]
    for i in range(count):
        workflow = chosen[i % len(chosen)]
        fields = workflow.message.sample(rng)
        assert fields is not None  # checked above
        order: dict[str, Any] = {"order_id": f"{prefix}-{run}-{i:05d}", **fields}
        if reply_to:
            order["reply_to"] = reply_to
        if workflows:
            order["workflow"] = workflow.name
        yield order


def unsampled(workflows: list[str] | None, registry: Registry | None = None) -> list[str]:
    """Those of the workflows (None: the default) whose message model gives no samples."""
    registry = registry or REGISTRY
    chosen = [registry.get(w) for w in workflows] if workflows else [registry.get()]
    return sorted({w.name for w in chosen if w.message.sample(random.Random(0)) is None})


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
