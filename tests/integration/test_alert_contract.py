"""One contract, two alert sinks: the fake the service-layer tests use and the table sink
against Azurite record the same alerts, or the fast tests prove nothing of alerts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.alerts import AlertSink, TableAlertSink
from shared.domain.alerts import AlertKind, OperatorAlert
from tests.fakes import FakeAlertSink

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.fixture(params=["fake", "table"])
def sink(request: pytest.FixtureRequest, app_env: Callable[..., dict[str, str]]
         ) -> tuple[AlertSink, Callable[[], list[tuple[str, str]]]]:
    """A sink, and what it recorded: (order, reason) of each alert kept."""
    if request.param == "fake":
        fake = FakeAlertSink()
        return fake, lambda: sorted((a.order_id, a.reason) for a in fake.alerts.values())
    from shared import bootstrap

    env = app_env()
    c = bootstrap.container()
    table = c.tables.get_table_client(env["OperatorAlertsTableName"])
    return TableAlertSink(table), lambda: sorted(
        (e["OrderID"], e["Reason"]) for e in table.list_entities())


def test_an_alert_raised_again_is_kept_once_and_keyless_ones_apart(
        sink: tuple[AlertSink, Callable[[], list[tuple[str, str]]]]) -> None:
    s, recorded = sink
    first = OperatorAlert(AlertKind.ORDER_FAILED, "o-1", "card declined", T0, key="o-1.3.0")
    s.raise_alert(first)
    s.raise_alert(first)  # a replay
    s.raise_alert(OperatorAlert(first.kind, "o-1", "card declined", T0 + timedelta(hours=3),
                                key="o-1.3.0"))  # raised again later the same day
    s.raise_alert(OperatorAlert(AlertKind.ORDER_CONFLICT, "o-2", "another body", T0))
    s.raise_alert(OperatorAlert(AlertKind.ORDER_CONFLICT, "o-2", "a third body", T0))
    assert recorded() == [("o-1", "card declined"), ("o-2", "a third body"),
                          ("o-2", "another body")]
