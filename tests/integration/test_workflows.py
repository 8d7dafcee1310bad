"""Two workflows in one app against Azurite: an order names its workflow (or gets the default),
its record keeps it, and the engine walks that workflow's steps, undoing only what has an undo.
These are the examples' own tests: the engine's tests do not depend on which steps they have."""

from __future__ import annotations

import json

import pytest

from shared.domain.workflow import Registry
from shared.workflows import REGISTRY
from tests.integration.conftest import Pipeline
from tests.integration.helpers import drain_json, entities, function, order, sb_message
from tests.integration.test_scheduler import reply, state

intake = function("intake")


@pytest.fixture
def workflows() -> Registry:
    return REGISTRY


def _answer(p: Pipeline, queue_setting: str, outcome: str = "ok",
            error: str | None = None) -> dict[str, object]:
    (req,) = drain_json(p.env[queue_setting])
    p.container.scheduler.handle_reply(reply(req, outcome, error))
    return req


def test_an_order_naming_the_second_workflow_follows_its_steps(pipeline: Pipeline) -> None:
    intake(msg=sb_message(order("d-1", workflow="digital-delivery")))
    s = state(pipeline, "d-1")
    assert (s["Workflow"], s["WorkflowVersion"]) == ("digital-delivery", 1)
    assert list(s["Steps"]) == ["charge_payment", "send_download_link"]
    assert drain_json(pipeline.env["InventoryRequestsQueueName"]) == []
    assert _answer(pipeline, "PaymentRequestsQueueName")["step"] == "charge_payment"
    assert _answer(pipeline, "EmailRequestsQueueName")["step"] == "send_download_link"
    assert state(pipeline, "d-1")["ProcessState"] == "Processed"
    view = pipeline.container.operator.get("d-1")  # as the API, the CLI and the console show it
    assert (view.Workflow, view.WorkflowVersion) == ("digital-delivery", 1)


def test_a_step_without_an_undo_is_not_undone_and_the_one_before_it_is(
        pipeline: Pipeline) -> None:
    intake(msg=sb_message(order("d-2", workflow="digital-delivery")))
    _answer(pipeline, "PaymentRequestsQueueName")
    _answer(pipeline, "EmailRequestsQueueName", "permanent_error", "mailbox unavailable")
    (undo,) = drain_json(pipeline.env["PaymentRequestsQueueName"])
    assert (undo["step"], undo["action"]) == ("charge_payment", "undo")
    pipeline.container.scheduler.handle_reply(reply(undo))
    s = state(pipeline, "d-2")
    assert (s["ProcessState"], s["Compensation"]) == ("Error", "Done")
    assert s["Steps"]["charge_payment"]["status"] == "compensated"
    assert s["Steps"]["send_download_link"]["status"] == "failed"
    assert drain_json(pipeline.env["EmailRequestsQueueName"]) == []


def test_an_order_naming_no_workflow_follows_the_default(pipeline: Pipeline) -> None:
    intake(msg=sb_message(order("o-1")))
    assert state(pipeline, "o-1")["Workflow"] == "order-fulfilment"
    assert json.loads(entities(pipeline.env["StateTableName"], "RowKey eq 'order'")[0][
        "Document"]).get("workflow") is None


def test_an_order_naming_a_workflow_the_app_does_not_run_is_rejected_with_the_names(
        pipeline: Pipeline) -> None:
    intake(msg=sb_message(order("x-1", workflow="no-such-flow"), message_id="m-x"))
    (rej,) = entities(pipeline.env["RejectedOrdersTableName"])
    assert rej["Kind"] == "invalid" and "no-such-flow" in rej["Reason"]
    assert "digital-delivery" in rej["Reason"] and "order-fulfilment" in rej["Reason"]
    assert entities(pipeline.env["StateTableName"]) == []
