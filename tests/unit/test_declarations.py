"""A declaration the app cannot run is refused as it is made, with a DeclarationError that names
it and says what to change in the docs' words (not a pattern a person must decode)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain.declarations import DeclarationError
from shared.domain.limits import Limit
from shared.domain.services import CodeService
from shared.domain.step_policy import StepRetry
from shared.domain.workflow import Registry, Workflow
from tests.workflow import FLOW, Thing


def test_a_workflow_declared_wrongly_is_named_and_the_rule_said_in_words() -> None:
    bad = (replace(FLOW.steps[0], service="loyalty_svc"),)
    with pytest.raises(DeclarationError) as e:
        Workflow(name="loyalty-points", version=2, steps=bad, message=Thing)
    said = str(e.value)
    assert said.startswith("workflow 'loyalty-points' v2: a service's name is 2 to 31 lower-case")
    assert "['loyalty_svc']" in said and "^[" not in said
    with pytest.raises(DeclarationError, match="workflow 'Loyalty' v1: a workflow's name is 1 to"):
        Workflow(name="Loyalty", steps=FLOW.steps, message=Thing)


@pytest.mark.parametrize("declare", [
    lambda: StepRetry(backoff=(timedelta(seconds=9), timedelta(seconds=1))),
    lambda: Limit(),
    lambda: CodeService("beta", operations={}),
    lambda: Registry.of([FLOW, FLOW]),
], ids=["step retry", "limit", "code service", "registry"])
def test_every_kind_of_declaration_says_so_with_the_same_error(declare: object) -> None:
    with pytest.raises(DeclarationError):
        declare()  # type: ignore[operator]


def test_the_line_a_developer_reads_says_where_declarations_live() -> None:
    line = DeclarationError("workflow 'x' v1: a workflow needs at least one step").for_a_person()
    assert line.startswith("workflow 'x' v1: a workflow needs at least one step")
    assert "shared/workflows/" in line and "docs/adapting.md" in line
