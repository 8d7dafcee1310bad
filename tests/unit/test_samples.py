"""Sample orders (the CLI's `send`, the demo, the bench) come from each workflow's message model:
valid for the workflow they name, and none at all for a workflow whose model gives none."""

from __future__ import annotations

import json

import pytest

from orderctl.samples import NoSamples, sample_orders, unsampled
from shared.domain.workflow import Registry
from shared.workflows import REGISTRY
from tests.workflow import FLOW


@pytest.mark.parametrize("name", REGISTRY.names)
def test_each_shipped_workflows_samples_are_valid_orders_of_it(name: str) -> None:
    orders = list(sample_orders(20, seed=3, workflows=[name], reply_to="order-status-x"))
    for o in orders:
        message = REGISTRY.parse(json.dumps(o))  # raises InvalidOrder with the reason
        assert message.workflow == name and message.order_id == o["order_id"]
    assert len({o["order_id"] for o in orders}) == 20
    assert list(sample_orders(20, seed=3, workflows=[name], reply_to="order-status-x")) == orders


def test_the_default_workflows_samples_name_no_workflow() -> None:
    (o,) = sample_orders(1)
    assert "workflow" not in o and REGISTRY.parse(json.dumps(o)).workflow is None


def test_a_workflow_whose_model_gives_no_samples_is_named_before_any_order() -> None:
    both = Registry.of([*REGISTRY.workflows, FLOW], default=REGISTRY.default)
    assert unsampled([FLOW.name], both) == [FLOW.name]
    assert unsampled(None, both) == []
    orders = sample_orders(4, workflows=[REGISTRY.default, FLOW.name], registry=both)
    with pytest.raises(NoSamples, match=f"workflow {FLOW.name} gives no sample orders"):
        next(orders)
