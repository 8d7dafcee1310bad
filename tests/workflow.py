"""The engine's own test workflow: three steps on three services, each undoable, named for
nothing in particular. The engine's tests walk it, not the shipped example, so that a user who
edits the example breaks only the example's tests (tests/integration/test_workflows.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

from shared.domain.workflow import Registry, Step, Workflow
from shared.domain.workflow_message import WorkflowMessage


class Thing(WorkflowMessage):
    """The test workflow's message: what tests/integration/helpers.order() sends, loosely."""

    customer_id: str
    items: list[dict[str, Any]]


HOLD = Step("hold", service="alpha", operation="hold", compensation="release",
            budget=timedelta(seconds=30))
TAKE = Step("take", service="beta", operation="take", compensation="give_back",
            budget=timedelta(seconds=30))
SEND = Step("send", service="gamma", operation="send", compensation="recall",
            budget=timedelta(seconds=60))
FLOW = Workflow(name="test-flow", steps=(HOLD, TAKE, SEND), message=Thing)
REGISTRY = Registry.of([FLOW])
SERVICES = sorted(FLOW.agents)


def queue_settings(suffix: str, services: list[str] = SERVICES) -> dict[str, str]:
    """Each service's requests queue, named for one test (the defaults are shared)."""
    return {f"{s.capitalize()}RequestsQueueName": f"{s}-{suffix}" for s in services}


class CustomerThing(Thing):
    """The test workflow's message naming its customer as a column of the stored order, which
    the operator's search by customer reads (Thing names none: such a search is refused)."""

    customer_column: ClassVar[str | None] = "Customer"

    def columns(self) -> dict[str, str]:
        return {"Customer": self.customer_id}


# The test workflow, its orders searchable by customer.
BY_CUSTOMER = Registry.of([replace(FLOW, message=CustomerThing)])
