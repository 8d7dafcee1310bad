"""Each fixture is an order in flight as an earlier release stored it (made by that release's
own code: make_history.py). This release finishes it, with each step's work done once, or
undoes what was done under the keys the work was done with."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.workflows.orders.message import parse_order
from tests.integration.conftest import Pipeline
from tests.integration.helpers import drain_json
from tests.integration.test_scheduler import reply, state

FIXTURES = sorted((Path(__file__).parent / "history").glob("*.json"))
WHEN = ("CompleteBy", "CreatedAt", "UpdatedAt", "Since")


def _entity(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: datetime.fromisoformat(v) if k in WHEN else v for k, v in raw.items()}


def _stored_as_then(p: Pipeline, fixture: dict[str, Any]) -> str:
    """The fixture's rows written as its release wrote them; the clock past its step's time."""
    c, env = p.container, p.env
    states = c.tables.get_table_client(env["StateTableName"])
    s = _entity(fixture["state"])
    o = parse_order(json.dumps(fixture["order"]))
    states.create_entity({"PartitionKey": o.order_id, "RowKey": "order",
                          "Document": json.dumps(o.document()), "Fingerprint": o.fingerprint(),
                          "CustomerId": o.customer_id, "Total": str(o.total),
                          "ReceivedAt": s["CreatedAt"]})
    states.create_entity(s)
    c.tables.get_table_client(env["InFlightTableName"]).create_entity(
        _entity(fixture["index"]))
    p.clock.now = s["CompleteBy"] + timedelta(seconds=1)
    return o.order_id


def _charge_sent_again(p: Pipeline) -> dict[str, Any]:
    """The old release's step timed out under it: this release's Supervisor sends it again
    (its first tick sees the months since as an outage, so without counting a failure)."""
    report = p.container.supervisor.tick()
    assert report.retried + report.excused == 1
    (charge,) = drain_json(p.env["PaymentRequestsQueueName"])
    assert charge["step"] == "charge_payment" and charge["action"] == "do"
    return charge


@pytest.mark.parametrize("path", FIXTURES, ids=lambda f: f.stem)
def test_an_order_in_flight_at_the_upgrade_is_finished_with_its_work_done_once(
        pipeline: Pipeline, path: Path) -> None:
    fixture = json.loads(path.read_text())
    oid = _stored_as_then(pipeline, fixture)
    pipeline.container.scheduler.handle_reply(reply(_charge_sent_again(pipeline)))
    (ship,) = drain_json(pipeline.env["ShippingRequestsQueueName"])
    pipeline.container.scheduler.handle_reply(reply(ship))
    s = state(pipeline, oid)
    assert s["ProcessState"] == "Processed"
    # The step the old release completed kept the key its work was done under.
    assert s["Steps"]["reserve_inventory"]["work_key"] == fixture["work_done_under"][
        "reserve_inventory"]
    assert drain_json(pipeline.env["InventoryRequestsQueueName"]) == []  # not done again


@pytest.mark.parametrize("path", FIXTURES, ids=lambda f: f.stem)
def test_an_order_in_flight_at_the_upgrade_that_fails_has_its_old_work_undone(
        pipeline: Pipeline, path: Path) -> None:
    fixture = json.loads(path.read_text())
    oid = _stored_as_then(pipeline, fixture)
    charge = _charge_sent_again(pipeline)
    pipeline.container.scheduler.handle_reply(reply(charge, "permanent_error", "declined"))
    # The refused charge did nothing: it is not undone.
    assert drain_json(pipeline.env["PaymentRequestsQueueName"]) == []
    reserved = fixture["work_done_under"]["reserve_inventory"]
    # The old release kept no answer of the reservation: it is learned first, asked again
    # under the key the old release's Agent did it under (the service answers with it).
    (again,) = drain_json(pipeline.env["InventoryRequestsQueueName"])
    assert (again["action"], again["idempotency_key"]) == ("do", reserved)
    assert state(pipeline, oid)["Steps"]["reserve_inventory"]["status"] == "learning"
    pipeline.container.scheduler.handle_reply(reply(again, result={"reservation": "r-1"}))
    (undo_reserve,) = drain_json(pipeline.env["InventoryRequestsQueueName"])
    # The undo names the work the old release did, by its key; the record holds its answer.
    assert (undo_reserve["action"], undo_reserve["compensates"]) == ("undo", reserved)
    step = state(pipeline, oid)["Steps"]["reserve_inventory"]
    assert (step["work_key"], step["result"]) == (reserved, {"reservation": "r-1"})
    pipeline.container.scheduler.handle_reply(reply(undo_reserve))
    s = state(pipeline, oid)
    assert (s["ProcessState"], s["Compensation"]) == ("Error", "Done")
    assert s["Steps"]["charge_payment"]["status"] == "failed"
    assert drain_json(pipeline.env["PaymentRequestsQueueName"]) == []
