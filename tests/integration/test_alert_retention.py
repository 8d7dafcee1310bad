"""Operator alerts are kept for AlertRetentionDays: each alert raised deletes up to
EXPIRE_PER_ALERT rows of days past it, so alerts raised from outside (refused requests) cannot
grow the table for ever. Against Azurite."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from shared import bootstrap
from shared.adapters.alerts import EXPIRE_PER_ALERT, TableAlertStore
from shared.domain.alerts import AlertKind, OperatorAlert
from tests.integration.helpers import entities

T0 = datetime(2026, 6, 1, 12, tzinfo=UTC)


def alert(order_id: str, at: datetime) -> OperatorAlert:
    # A kind of its own row per alert (those raised from outside are one row a day besides).
    return OperatorAlert(AlertKind.RECORD_UNREADABLE, order_id, "a record nobody can read", at,
                         key=f"unreadable.{order_id}")


def test_alerts_past_their_retention_go_as_new_ones_come_in_bounded_per_alert(
        app_env: Callable[..., dict[str, str]]) -> None:
    env = app_env()
    sink = TableAlertStore(bootstrap.container().tables.get_table_client(
        env["OperatorAlertsTableName"]), timedelta(days=90))
    for i in range(EXPIRE_PER_ALERT + 2):  # a flood of 100 days ago
        sink.raise_alert(alert(f"old-{i}", T0 - timedelta(days=100, minutes=i)))
    sink.raise_alert(alert("kept", T0 - timedelta(days=89)))  # inside the retention

    def orders() -> set[str]:
        return {e["OrderID"] for e in entities(env["OperatorAlertsTableName"])}

    sink.raise_alert(alert("new-1", T0))
    left = {o for o in orders() if o.startswith("old-")}
    assert len(left) == 2  # ten gone with the first alert raised past their retention...
    assert {"kept", "new-1"} <= orders()
    sink.raise_alert(alert("new-2", T0 + timedelta(seconds=1)))
    assert orders() == {"kept", "new-1", "new-2"}  # ...the rest with the next
    sink.raise_alert(alert("new-2", T0 + timedelta(seconds=1)))  # a replay: still one row
    assert len(entities(env["OperatorAlertsTableName"])) == 3


def test_the_retention_is_a_setting_named_when_wrong() -> None:
    import pytest

    from shared.settings import SettingsError, load_settings

    base = {"AzureWebJobsStorage": "UseDevelopmentStorage=true"}
    assert load_settings(base).alert_retention_days == 90
    assert load_settings({**base, "AlertRetentionDays": "7"}).alert_retention_days == 7
    with pytest.raises(SettingsError, match="AlertRetentionDays"):
        load_settings({**base, "AlertRetentionDays": "0"})
