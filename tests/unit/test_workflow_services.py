"""A code service is declared once: every workflow of the registry that calls it runs it as code,
and each of their steps' operations must be its own."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.domain.services import Call, CodeService
from shared.domain.workflow import Registry, Step, Workflow
from tests.workflow import FLOW, Thing


def _op(call: Call) -> dict[str, Any]:
    return {}


BETA = CodeService("beta", operations={"take": _op, "give_back": _op})


def test_a_service_declared_as_code_once_is_code_for_every_workflow_that_calls_it() -> None:
    coded = Workflow(name="coded", steps=FLOW.steps, message=Thing, services=(BETA,))
    plain = Workflow(name="plain", steps=(FLOW.steps[1],), message=Thing)
    registry = Registry.of([coded, plain])
    assert registry.code_services == {"beta": BETA}


def test_an_operation_the_code_service_lacks_is_refused_at_start_up() -> None:
    coded = Workflow(name="coded", steps=FLOW.steps, message=Thing, services=(BETA,))
    other = Workflow(name="other", message=Thing, steps=(
        Step("take", service="beta", operation="grab", compensation=None,
             budget=timedelta(seconds=5)),))
    with pytest.raises(ValueError, match="has no operation 'grab'"):
        Registry.of([coded, other])
    with pytest.raises(ValueError, match="has no operation 'grab'"):
        Workflow(name="other", message=Thing, steps=other.steps, services=(BETA,))
