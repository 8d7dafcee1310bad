"""One contract, two alert stores and two rejection stores: the fakes the service-layer tests
use and the table stores against Azurite record, list and acknowledge alike, or the fast tests
prove nothing of alerts and rejections."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters import alerts as alerts_adapter
from shared.adapters.alerts import (
    AckRefused,
    AlertNotFound,
    AlertStore,
    TableAlertStore,
)
from shared.adapters.rejections import (
    Rejection,
    RejectionKind,
    RejectionStore,
    TableRejectionStore,
)
from shared.domain.alerts import AlertKind, OperatorAlert
from tests.fakes import FakeAlertStore, FakeRejections

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.fixture(params=["fake", "table"])
def alerts(request: pytest.FixtureRequest, app_env: Callable[..., dict[str, str]]
           ) -> AlertStore:
    if request.param == "fake":
        return FakeAlertStore()
    from shared import bootstrap

    env = app_env()
    return TableAlertStore(bootstrap.container().tables.get_table_client(
        env["OperatorAlertsTableName"]))


@pytest.fixture(params=["fake", "table"])
def rejections(request: pytest.FixtureRequest, app_env: Callable[..., dict[str, str]]
               ) -> RejectionStore:
    if request.param == "fake":
        return FakeRejections()
    from shared import bootstrap

    env = app_env()
    return TableRejectionStore(bootstrap.container().tables.get_table_client(
        env["RejectedOrdersTableName"]))


def _listed(store: AlertStore, today: datetime = T0) -> list[tuple[str | None, str | None]]:
    return [(a.order_id, a.reason) for a in store.recent(today, 7)]


def test_an_alert_raised_again_is_kept_once_and_keyless_ones_apart(alerts: AlertStore) -> None:
    first = OperatorAlert(AlertKind.ORDER_FAILED, "o-1", "card declined", T0, key="o-1.3.0")
    alerts.raise_alert(first)
    alerts.raise_alert(first)  # a replay
    alerts.raise_alert(OperatorAlert(first.kind, "o-1", "card declined", T0 + timedelta(hours=3),
                                     key="o-1.3.0"))  # raised again later the same day
    alerts.raise_alert(OperatorAlert(AlertKind.RECORD_UNREADABLE, "o-2", "another body", T0))
    alerts.raise_alert(OperatorAlert(AlertKind.RECORD_UNREADABLE, "o-2", "a third body", T0))
    assert sorted(_listed(alerts, T0 + timedelta(hours=4))) == [
        ("o-1", "card declined"), ("o-2", "a third body"), ("o-2", "another body")]


def test_alerts_are_listed_newest_first_by_day_and_an_order_s_oldest_first(
        alerts: AlertStore) -> None:
    for n, at in enumerate([T0 - timedelta(days=1), T0, T0 + timedelta(minutes=5),
                            T0 - timedelta(days=9)]):  # the last: before the days read
        alerts.raise_alert(OperatorAlert(AlertKind.ORDER_FAILED, f"o-{n % 2}", f"r{n}", at,
                                         step="charge", key=f"k{n}"))
    assert _listed(alerts) == [("o-0", "r2"), ("o-1", "r1"), ("o-0", "r0")]
    assert [a.reason for a in alerts.of_order("o-0", T0, 7)] == ["r0", "r2"]
    (newest, *_) = alerts.recent(T0, 7)
    assert (newest.kind, newest.step, newest.raised_at) == (
        "OrderFailed", "charge", T0 + timedelta(minutes=5))
    assert newest.alert_id.startswith("20260101.")


def test_a_scan_stops_at_its_cap_and_says_so(alerts: AlertStore,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(3):
        alerts.raise_alert(OperatorAlert(AlertKind.SUPERVISION_FAILING, f"o-{n}", "stuck",
                                         T0 + timedelta(seconds=n), key=f"r{n}"))
    monkeypatch.setattr(alerts_adapter, "ALERT_SCAN", 2)
    scan = alerts.recent(T0, 7)
    assert [a.order_id for a in scan] == ["o-2", "o-1"] and scan.cut
    whole = alerts.recent(T0, 1)
    monkeypatch.setattr(alerts_adapter, "ALERT_SCAN", 3)
    assert len(list(whole)) == 3 and not whole.cut


def test_an_alert_is_acknowledged_once(alerts: AlertStore) -> None:
    alerts.raise_alert(OperatorAlert(AlertKind.ORDER_FAILED, "o-1", "declined", T0, key="k"))
    (a,) = alerts.recent(T0, 1)
    day, row = a.alert_id.split(".")
    acked = alerts.acknowledge(day, row, "ops", "seen", T0 + timedelta(minutes=1))
    assert (acked.alert_id, acked.acknowledged_by, acked.ack_note, acked.acknowledged_at) == (
        a.alert_id, "ops", "seen", T0 + timedelta(minutes=1))
    (listed,) = alerts.recent(T0, 1)
    assert listed == acked
    with pytest.raises(AckRefused, match="acknowledged by ops"):
        alerts.acknowledge(day, row, "someone else", None, T0 + timedelta(minutes=2))
    with pytest.raises(AlertNotFound):
        alerts.acknowledge(day, "0000000000000-000000000000", "ops", None, T0)


def _rejection(n: int, body: bytes = b"{}", kind: RejectionKind = RejectionKind.INVALID
               ) -> Rejection:
    return Rejection(kind, f"reason {n}", f"m-{n}", body, 1, T0 + timedelta(seconds=n),
                     sent_at=T0 + timedelta(seconds=n))


def test_rejections_page_newest_first_and_are_found_by_message(
        rejections: RejectionStore) -> None:
    for n in range(3):
        rejections.record(_rejection(n, b'{"n": %d}' % n))
    # A redelivery of the same message is its row again, not a second one.
    rejections.record(_rejection(1, b'{"n": 1}'))
    first, token = rejections.page(2, None)
    assert [r.message_id for r in first] == ["m-2", "m-1"] and token is not None
    rest, end = rejections.page(2, token)
    assert [r.message_id for r in rest] == ["m-0"] and end is None
    found = rejections.of_message("m-1")
    assert found is not None
    assert (found.kind, found.reason, found.body, found.body_bytes, found.delivery_count) == (
        RejectionKind.INVALID, "reason 1", '{"n": 1}', 8, 1)
    assert found.rejected_at == T0 + timedelta(seconds=1)
    assert rejections.of_message("m-9") is None


def test_alerts_raised_by_what_anyone_may_send_are_one_row_a_day_per_kind_and_source(
        alerts: AlertStore) -> None:
    """A flood of made-up requests is one row, counted, showing the latest: it cannot push an
    order's alert out of a listing, and an acknowledged flood that goes on is open again."""
    failed = OperatorAlert(AlertKind.ORDER_FAILED, "o-real", "declined", T0, key="real")
    alerts.raise_alert(failed)
    for n in range(30):
        refused = OperatorAlert(AlertKind.REQUEST_REFUSED, f"x-{n}", f"made up {n}",
                                T0 + timedelta(seconds=n + 1), step="take", key=f"r{n}",
                                source="beta Agent")
        alerts.raise_alert(refused)
    alerts.raise_alert(refused)  # a copy of the latest: not counted again
    alerts.raise_alert(OperatorAlert(AlertKind.REQUEST_REFUSED, "x-s", "forged reply",
                                     T0 + timedelta(minutes=5), key="s", source="Scheduler"))
    listed = list(alerts.recent(T0, 1))
    # The order's alert first: the day's rolled-up rows come after its single alerts.
    assert (listed[0].kind, listed[0].count) == ("OrderFailed", None)
    assert sorted((a.kind, a.source or "", a.count) for a in listed[1:]) == [
        ("RequestRefused", "Scheduler", 1), ("RequestRefused", "beta Agent", 30)]
    beta = next(a for a in listed if a.source == "beta Agent")
    assert (beta.order_id, beta.reason, beta.raised_at, beta.last_raised_at) == (
        "x-29", "made up 29", T0 + timedelta(seconds=1), T0 + timedelta(seconds=30))
    # Only one kind, chosen before the scan's cap.
    assert [a.order_id for a in alerts.recent(T0, 1, "OrderFailed")] == ["o-real"]
    # Acknowledged, then more come: open again, counted on.
    day, row = beta.alert_id.split(".")
    alerts.acknowledge(day, row, "ops", None, T0 + timedelta(minutes=1))
    alerts.raise_alert(OperatorAlert(AlertKind.REQUEST_REFUSED, "x-99", "again",
                                     T0 + timedelta(minutes=2), key="r99", source="beta Agent"))
    again = next(a for a in alerts.recent(T0, 1) if a.source == "beta Agent")
    assert (again.alert_id, again.count, again.acknowledged_at, again.order_id) == (
        beta.alert_id, 31, None, "x-99")
