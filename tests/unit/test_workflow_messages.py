"""Each workflow names its message model: intake reads which workflow a message names, then
validates the whole message with that workflow's model, and nothing else."""

from __future__ import annotations

import dataclasses
import json

import pytest

from shared.domain.workflow import Registry, Workflow
from shared.domain.workflow_message import InvalidOrder, WorkflowMessage
from tests.workflow import FLOW, Thing


class Ping(WorkflowMessage):
    target: str


PINGS = dataclasses.replace(FLOW, name="pings", message=Ping)
BOTH = Registry.of([FLOW, PINGS])


def test_a_message_is_read_with_its_own_workflows_model() -> None:
    ping = BOTH.parse(json.dumps({"order_id": "p-1", "workflow": "pings", "target": "x"}))
    assert isinstance(ping, Ping) and ping.target == "x"
    thing = BOTH.parse(json.dumps({"order_id": "t-1", "customer_id": "c", "items": []}))
    assert isinstance(thing, Thing)  # the default workflow's model when it names none


def test_another_workflows_fields_are_refused_with_the_reason() -> None:
    with pytest.raises(InvalidOrder, match="customer_id: Extra inputs are not permitted"):
        BOTH.parse(json.dumps({"order_id": "p-2", "workflow": "pings", "target": "x",
                               "customer_id": "c"}))
    with pytest.raises(InvalidOrder, match="target: Field required"):
        BOTH.parse(json.dumps({"order_id": "p-3", "workflow": "pings"}))


def test_the_reason_says_which_workflow_the_order_was_read_as() -> None:
    """A ping that forgot to name its workflow reads as the default's order: its reason said
    "target: Extra inputs are not permitted" and never that the workflow was missing."""
    with pytest.raises(InvalidOrder, match=r"target: Extra inputs.*\(read as workflow "
                                           rf"'{FLOW.name}', the default \(it names no "
                                           r'"workflow"\)\)$'):
        BOTH.parse(json.dumps({"order_id": "p-4", "target": "x"}))
    with pytest.raises(InvalidOrder, match=r"\(read as workflow 'pings'\)$"):
        BOTH.parse(json.dumps({"order_id": "p-5", "workflow": "pings"}))


def test_a_workflow_the_app_does_not_run_or_a_body_that_is_no_object_is_a_reason() -> None:
    with pytest.raises(InvalidOrder, match="workflow: no workflow 'nope'"):
        BOTH.parse(json.dumps({"order_id": "x", "workflow": "nope"}))
    with pytest.raises(InvalidOrder, match="body"):
        BOTH.parse(b"[1, 2]")
    with pytest.raises(InvalidOrder, match="Invalid JSON"):
        BOTH.parse(b"{not json")


def test_a_declaration_must_name_its_message_model() -> None:
    with pytest.raises(TypeError, match="message"):
        Workflow(name="x", steps=FLOW.steps)  # type: ignore[call-arg]


def test_a_key_given_twice_is_refused_naming_it() -> None:
    """Parsers disagree on which one counts (Python's and pydantic's take the last, others the
    first): a sender's "amount" twice would mean one thing here and another to a service."""
    for body in ('{"order_id": "d-1", "customer_id": "c", "customer_id": "d", "items": []}',
                 '{"order_id": "d-2", "customer_id": "c", "items": [{"sku": "A", "sku": "B"}]}'):
        with pytest.raises(InvalidOrder, match="given twice"):
            BOTH.parse(body)
    assert BOTH.parse('{"order_id": "d-3", "customer_id": "c", "items": []}').order_id == "d-3"
    with pytest.raises(InvalidOrder, match="Invalid JSON"):  # not JSON: the model says why
        BOTH.parse(b'{"a": 1, "a": ')
