"""The order-fulfilment workflow, declared as data.

Add, remove or reorder steps here; the Scheduler only walks this list. Each step names the Agent
that performs it (one Agent per remote service), the operation it asks for, the operation that
undoes it (``None`` when nothing can be undone) and how long one attempt may take.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta


@dataclass(frozen=True)
class Step:
    name: str
    agent: str
    operation: str
    compensation: str | None
    budget: timedelta

    def operation_for(self, action: str) -> str:
        if action == "undo":
            if self.compensation is None:
                raise ValueError(f"step {self.name!r} has no compensation")
            return self.compensation
        return self.operation


@dataclass(frozen=True)
class Workflow:
    name: str
    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        names = [s.name for s in self.steps]
        if not names:
            raise ValueError("a workflow needs at least one step")
        if len(set(names)) != len(names):
            raise ValueError(f"step names must be unique: {names}")

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def agents(self) -> frozenset[str]:
        return frozenset(s.agent for s in self.steps)

    def with_budgets(self, budgets: dict[str, timedelta]) -> Workflow:
        unknown = set(budgets) - {s.name for s in self.steps}
        if unknown:
            raise ValueError(f"budget given for unknown steps: {sorted(unknown)}")
        return replace(
            self, steps=tuple(replace(s, budget=budgets.get(s.name, s.budget)) for s in self.steps)
        )


ORDER_FULFILMENT = Workflow(
    name="order-fulfilment",
    steps=(
        Step("reserve_inventory", agent="inventory", operation="reserve",
             compensation="release", budget=timedelta(seconds=30)),
        Step("charge_payment", agent="payment", operation="charge",
             compensation="refund", budget=timedelta(seconds=30)),
        # A shipment booked by an attempt we gave up on must be cancellable too, or an order
        # that fails on a hung shipping call would leave a parcel behind.
        Step("arrange_shipping", agent="shipping", operation="ship",
             compensation="cancel", budget=timedelta(seconds=60)),
    ),
)
