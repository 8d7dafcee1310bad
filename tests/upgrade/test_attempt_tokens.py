"""A request or reply carrying its attempt's token (4ec0fd8 on) is its attempt's own to this
release, judged against the record the same release left beside it (issue #30).

test_legacy_shapes.py runs these fixtures to the end; this holds the verdict itself: the
Agent's judgement of the request (shared/domain/provenance.py) is in flight, and the Scheduler
takes the reply, where a copy with another token is forged. A release that read the token off
the record under another name, or stopped sending it, would pass an order through the
Supervisor's retries and fail here.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from shared.adapters.state_entity import state_from_entity
from shared.domain.messages import AgentReply, AgentRequest
from shared.domain.provenance import Verdict, judge
from shared.domain.state import ForgedReply, OrderState
from shared.domain.transitions import apply_reply
from shared.workflows import REGISTRY
from tests.upgrade.test_legacy_shapes import FIXTURES, from_odata


class _Entity(dict[str, Any]):
    """A stored entity as the Table SDK hands it over: its values and its ETag."""

    metadata = {"etag": "W/\"fixture\""}


def _tokened(kind: str) -> list[Any]:
    found = []
    for path in FIXTURES:
        fx = json.loads(path.read_text())
        if fx["kind"] == kind and fx["message"].get("token"):
            found.append(pytest.param(fx, id=path.stem))
    return found


def _record(fx: dict[str, Any]) -> OrderState:
    """The state record the release left beside the message (the fixture's context)."""
    (row,) = [e for e in fx["context"]["tables"]["OrderState"] if e["RowKey"] == "state"]
    return state_from_entity(_Entity(from_odata(row)))


def test_the_releases_with_tokens_have_fixtures_of_both_messages() -> None:
    assert {p.id.split("_")[1] for p in _tokened("agent-request")} >= {"4ec0fd8", "ce05056"}
    assert {p.id.split("_")[1] for p in _tokened("agent-reply")} >= {"4ec0fd8", "ce05056"}


@pytest.mark.parametrize("fx", _tokened("agent-request"))
def test_a_request_with_its_attempts_token_is_in_flight(fx: dict[str, Any]) -> None:
    state = _record(fx)
    req = AgentRequest.model_validate_json(json.dumps(fx["message"]))
    workflow = REGISTRY.get(state.workflow, state.workflow_version)
    service = fx["where"]["queue"]

    verdict = judge(state, req, service, workflow)
    assert verdict.verdict is Verdict.IN_FLIGHT, verdict.reason

    other = req.model_copy(update={"token": "another-attempts-token"})
    assert judge(state, other, service, workflow).verdict is Verdict.FORGED


@pytest.mark.parametrize("fx", _tokened("agent-reply"))
def test_a_reply_echoing_its_attempts_token_is_taken(fx: dict[str, Any]) -> None:
    state = _record(fx)
    reply = AgentReply.model_validate_json(json.dumps(fx["message"]))
    workflow = REGISTRY.get(state.workflow, state.workflow_version)
    now = datetime.fromisoformat(fx["context"]["now"])

    t = apply_reply(state, reply, "scheduler-after", now, workflow)
    assert t.step(reply.step).attempt == reply.attempt
    assert t.outbox_seq > state.outbox_seq  # a transition, with its effects to send

    with pytest.raises(ForgedReply):
        apply_reply(state, reply.model_copy(update={"token": None}), "scheduler-after", now,
                    workflow)

