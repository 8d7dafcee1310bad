"""A listing of alerts reads a bounded number of rows (ALERT_SCAN): when it stops there, the
API, the CLI and the console say so, so that a flood of one kind (refused requests from
outside) cannot hide an older open alert without a word (issue 33, item 4)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.adapters.alerts import TableAlertSink
from shared.domain.alerts import AlertKind, OperatorAlert
from shared.handlers import operator
from tests.integration.conftest import Pipeline


def test_a_listing_cut_short_by_its_scan_says_so(pipeline: Pipeline,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    sink = TableAlertSink(pipeline.container.tables.get_table_client(
        pipeline.env["OperatorAlertsTableName"]))
    start = pipeline.clock.now
    # The open one first, then a flood newer than it, all acknowledged
    sink.raise_alert(OperatorAlert(AlertKind.ORDER_FAILED, "o-open", "card declined", start,
                                   step="charge"))
    op = pipeline.container.operator
    for n in range(6):
        pipeline.clock.now = start + timedelta(minutes=n + 1)
        sink.raise_alert(OperatorAlert(AlertKind.REQUEST_REFUSED, f"o-{n}", "made up",
                                       pipeline.clock.now, key=f"refused.{n}"))
    for a in op.alerts(50, acknowledged=False).items:
        if a["OrderID"] != "o-open":
            op.acknowledge(a["AlertId"], "ops@example.com")

    monkeypatch.setattr(operator, "ALERT_SCAN", 5)
    hidden = op.alerts(50, acknowledged=False)
    assert hidden.items == [] and hidden.truncated  # the 5 newest read, the open one not
    assert op.overview()["AlertsComplete"] is False
    # Asked for no more than the rows read hold, nothing is claimed of the rest
    assert not op.alerts(3).truncated
    monkeypatch.setattr(operator, "ALERT_SCAN", 2000)
    found = op.alerts(50, acknowledged=False)
    assert [a["OrderID"] for a in found.items] == ["o-open"] and not found.truncated
    assert op.overview()["AlertsComplete"] is True
