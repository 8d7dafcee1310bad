"""A listing of alerts reads a bounded number of rows (ALERT_SCAN): when it stops there, the
API, the CLI and the console say so, so that a flood of one kind (refused requests from
outside) cannot hide an older open alert without a word (issue 33, item 4)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters import alerts as alerts_adapter
from shared.adapters.alerts import TableAlertStore
from shared.domain.alerts import AlertKind, OperatorAlert
from shared.domain.messages import Action, AgentRequest
from tests.integration.conftest import Pipeline
from tests.workflow import HOLD


def test_a_listing_cut_short_by_its_scan_says_so(pipeline: Pipeline,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    sink = TableAlertStore(pipeline.container.tables.get_table_client(
        pipeline.env["OperatorAlertsTableName"]))
    start = pipeline.clock.now
    # The open one first, then a flood newer than it, all acknowledged
    sink.raise_alert(OperatorAlert(AlertKind.ORDER_FAILED, "o-open", "card declined", start,
                                   step="charge"))
    op = pipeline.container.operator
    for n in range(6):
        pipeline.clock.now = start + timedelta(minutes=n + 1)
        sink.raise_alert(OperatorAlert(AlertKind.SUPERVISION_FAILING, f"o-{n}", "stuck",
                                       pipeline.clock.now, key=f"stuck.{n}"))
    for a in op.alerts(50, acknowledged=False).alerts:
        if a.OrderID != "o-open":
            op.acknowledge(a.AlertId, "ops@example.com")

    monkeypatch.setattr(alerts_adapter, "ALERT_SCAN", 5)
    hidden = op.alerts(50, acknowledged=False)
    assert hidden.alerts == [] and hidden.truncated  # the 5 newest read, the open one not
    assert op.overview().AlertsComplete is False
    # Asked for no more than the rows read hold, nothing is claimed of the rest
    assert not op.alerts(3).truncated
    monkeypatch.setattr(alerts_adapter, "ALERT_SCAN", 2000)
    found = op.alerts(50, acknowledged=False)
    assert [a.OrderID for a in found.alerts] == ["o-open"] and not found.truncated
    assert op.overview().AlertsComplete is True


def test_an_alert_raised_again_later_is_the_same_row(pipeline: Pipeline) -> None:
    """A redelivered message (an intake conflict) or a restarted Supervisor raises its alert
    again at another time: one row, still acknowledged, not a second open one."""
    sink = TableAlertStore(pipeline.container.tables.get_table_client(
        pipeline.env["OperatorAlertsTableName"]))
    first = OperatorAlert(AlertKind.ORDER_CONFLICT, "o-1", "another body", pipeline.clock.now,
                          key="o-1.conflict.c5db7ea7")
    sink.raise_alert(first)
    op = pipeline.container.operator
    (listed,) = op.alerts(50).alerts
    op.acknowledge(listed.AlertId, "ops@example.com")
    for later in (timedelta(minutes=5), timedelta(hours=23)):
        sink.raise_alert(OperatorAlert(first.kind, first.order_id, first.reason,
                                       first.at + later, key=first.key))
    (again,) = op.alerts(50).alerts
    assert again.AlertId == listed.AlertId and again.AcknowledgedBy == "ops@example.com"
    assert op.alerts(50, acknowledged=False).alerts == []


def test_a_made_up_request_from_the_far_future_is_filed_today_and_expires_nothing(
        pipeline: Pipeline) -> None:
    """A refused request's alert is filed at the app's time, never the request's complete-by,
    which the sender chooses: year 9999 would file it where no listing looks, and its expiry
    delete every real alert as older than 90 days before it."""
    sink = TableAlertStore(pipeline.container.tables.get_table_client(
        pipeline.env["OperatorAlertsTableName"]))
    now = pipeline.clock.now
    for i in range(12):
        sink.raise_alert(OperatorAlert(AlertKind.ORDER_FAILED, f"real-{i}", "HTTP 422",
                                       now - timedelta(minutes=i), key=f"real-{i}"))
    far = datetime(9999, 12, 31, tzinfo=UTC)
    for n in (1, 2):
        forged = AgentRequest(order_id=f"x-{n}", step=HOLD.name, action=Action.UNDO,
                              operation=HOLD.compensation or "", attempt=1, complete_by=far,
                              idempotency_key=f"x-{n}.{HOLD.name}.undo", order={})
        assert pipeline.container.agents[HOLD.service].handle(forged.to_json()) is None
        # ... and a copy of the same request is not counted again
        pipeline.container.agents[HOLD.service].handle(forged.to_json())
    listed = pipeline.container.operator.alerts(100).alerts
    # The two refused requests are one row of the day, counted, showing the latest.
    assert sorted(a.OrderID or "" for a in listed) == sorted(
        [f"real-{i}" for i in range(12)] + ["x-2"])
    (refused,) = [a for a in listed if a.Kind == AlertKind.REQUEST_REFUSED.value]
    assert (refused.RaisedAt, refused.LastRaisedAt, refused.Count) == (now, now, 2)
    assert refused.Source == f"{HOLD.service} Agent"
    # Acknowledged by the id it is listed with.
    pipeline.container.operator.acknowledge(refused.AlertId, "ops@example.com")


def test_an_alert_is_recorded_though_the_look_for_it_fails(
        pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    """The look for an alert raised before is a query: if it fails (throttled, timed out),
    the alert is still recorded, and raise_alert raises only when the row could not be
    written (a carried alert raised again must not stop the compensation it goes with)."""
    from azure.core.exceptions import HttpResponseError

    table = pipeline.container.tables.get_table_client(pipeline.env["OperatorAlertsTableName"])
    sink = TableAlertStore(table)

    def throttled(*_: object, **__: object) -> None:
        raise HttpResponseError("503 Server Busy")

    monkeypatch.setattr(table, "query_entities", throttled)
    sink.raise_alert(OperatorAlert(AlertKind.ORDER_FAILED, "o-9", "card declined",
                                   pipeline.clock.now, key="o-9.3.0"))
    monkeypatch.undo()
    (row,) = pipeline.container.operator.alerts(10).alerts
    assert row.OrderID == "o-9"


def test_a_flood_of_made_up_requests_cannot_hide_an_orders_alert(
        pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each distinct made-up request was an alert row of its own, newest first: more of them
    than a listing reads, and an OrderFailed raised before them no longer showed, while the
    listing said it was complete. They are one row a day per source now, after the orders'."""
    sink = TableAlertStore(pipeline.container.tables.get_table_client(
        pipeline.env["OperatorAlertsTableName"]))
    start = pipeline.clock.now
    sink.raise_alert(OperatorAlert(AlertKind.ORDER_FAILED, "o-real", "card declined", start,
                                   step="charge", key="real"))
    monkeypatch.setattr(alerts_adapter, "ALERT_SCAN", 5)
    for n in range(12):
        pipeline.clock.now = start + timedelta(seconds=n + 1)
        forged = AgentRequest(order_id=f"junk-{n}", step=HOLD.name, action=Action.DO,
                              operation=HOLD.operation, attempt=1,
                              complete_by=pipeline.clock.now + timedelta(seconds=30),
                              idempotency_key=f"junk-{n}.{HOLD.name}.do", order={})
        assert pipeline.container.agents[HOLD.service].handle(forged.to_json()) is None
    op = pipeline.container.operator
    page = op.alerts(50, acknowledged=False)
    assert [(a.Kind, a.OrderID, a.Count) for a in page.alerts] == [
        ("OrderFailed", "o-real", None), ("RequestRefused", "junk-11", 12)]
    assert not page.truncated
    assert [a.OrderID for a in op.overview().Alerts] == ["o-real", "junk-11"]
    assert [a.OrderID for a in op.alerts(50, kind="OrderFailed").alerts] == ["o-real"]
