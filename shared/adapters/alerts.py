"""Operator alerts: a structured log event and a row in the alerts table, so an operator can
list them and acknowledge each. Raising the same alert (same key) twice adds no row.

Rows are kept for a retention (AlertRetentionDays): an alert can be raised from outside (a
request nobody sent is refused with one), so the table would otherwise grow for as long as
anyone sends. Each alert raised deletes up to EXPIRE_PER_ALERT rows of days past it, oldest
first, until none is left; then the sink looks again only when a new day passes the cut-off
(one query a day per instance, not one per alert). The log event (Application Insights) keeps
its own retention."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import TableClient, UpdateMode

from shared.domain.alerts import OperatorAlert, rolled_up

log = logging.getLogger("order_pipeline.alerts")


class AlertSink(Protocol):
    def raise_alert(self, alert: OperatorAlert) -> None:
        """Record the alert once per key; raise when it could not be recorded."""
        ...


class AlertNotFound(LookupError):
    pass


class AckRefused(Exception):
    """Already acknowledged, or acknowledged by someone else meanwhile: the message says."""


@dataclass(frozen=True)
class StoredAlert:
    """An alert as kept: ``alert_id`` is its day's partition and its row key, joined by a dot."""
    alert_id: str
    raised_at: datetime | None
    kind: str
    order_id: str | None
    step: str | None
    reason: str | None
    acknowledged_by: str | None = None
    acknowledged_at: datetime | None = None
    ack_note: str | None = None
    # A rolled-up row (domain.alerts.ROLLED_UP): what raised them, how many that day, when the
    # latest came (its order, step and reason are the latest's). None for a single alert.
    source: str | None = None
    count: int | None = None
    last_raised_at: datetime | None = None


# How many alert rows one listing reads at most, filtered or not: a bound on a listing's cost
# when nearly every alert is of the kind not asked for.
ALERT_SCAN = 2000


class AlertScan(Protocol):
    """The alerts of the last days, newest first, ALERT_SCAN of them at most: ``cut``, once
    iterated, says rows were left unread (a flood of alerts, refused requests say, would
    otherwise hide the older open ones without a word)."""
    cut: bool

    def __iter__(self) -> Iterator[StoredAlert]: ...


class AlertStore(AlertSink, Protocol):
    """The alerts an operator reads and acknowledges; ``today`` and ``days``: the UTC days
    read, today's and those before it. An alert rolled up (domain.alerts.rolled_up) is one
    row per kind and source a day, counted; raised again after its acknowledgement, it is open
    again (the acknowledgement covers what came before it)."""

    def recent(self, today: datetime, days: int, kind: str | None = None) -> AlertScan:
        """``kind``: only alerts of it, chosen before the scan's cap."""
        ...

    def of_order(self, order_id: str, today: datetime, days: int) -> list[StoredAlert]:
        """The order's alerts, oldest first."""
        ...

    def acknowledge(self, day: str, row: str, by: str, note: str | None,
                    at: datetime) -> StoredAlert:
        """Mark it seen, once: AlertNotFound, or AckRefused naming the first acknowledgement
        (or the one that came meanwhile)."""
        ...


def days_back(today: datetime, days: int) -> list[str]:
    """The partitions of ``days`` UTC days up to ``today``'s, newest first."""
    return [alert_partition(today - timedelta(days=back)) for back in range(days)]


def alert_row_key(alert: OperatorAlert) -> str:
    # Newest first within a day: the row key counts down; the key's hash makes a replay collide.
    # A rolled-up alert's row is the day's last, after every single alert of that day.
    if rolled_up(alert):
        digest = hashlib.sha256(f"{alert.kind.value}.{alert.source}".encode()).hexdigest()[:12]
        return f"{'9' * 13}-{digest}"
    countdown = 10**13 - int(alert.at.timestamp() * 1000)
    digest = hashlib.sha256((alert.key or repr(alert)).encode()).hexdigest()[:12]
    return f"{countdown:013d}-{digest}"


# Tries of a rolled-up row's conditional update, when others raise the same kind at once,
# each after a wait of up to ROLL_UP_PAUSE seconds times its number, at random.
ROLL_UP_TRIES = 8
ROLL_UP_PAUSE = 0.02


# Rows past their retention that one alert raised deletes: a flood drains what an earlier one
# left at the pace it adds.
EXPIRE_PER_ALERT = 10


def alert_partition(at: datetime) -> str:
    # The UTC day, whatever offset the time was given in.
    return at.astimezone(UTC).strftime("%Y%m%d")


def _stored(e: Any) -> StoredAlert:
    return StoredAlert(
        alert_id=f"{e['PartitionKey']}.{e['RowKey']}", raised_at=e.get("RaisedAt"),
        kind=str(e.get("Kind", "")), order_id=e.get("OrderID"), step=e.get("Step"),
        reason=e.get("Reason"), acknowledged_by=e.get("AcknowledgedBy"),
        acknowledged_at=e.get("AcknowledgedAt"), ack_note=e.get("AckNote"),
        source=e.get("Source"), count=e.get("Count"), last_raised_at=e.get("LastRaisedAt"))


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


class _TableScan:
    def __init__(self, table: TableClient, partitions: list[str], kind: str | None) -> None:
        self._table, self._partitions, self._kind = table, partitions, kind
        self.cut = False

    def __iter__(self) -> Iterator[StoredAlert]:
        read = 0
        where = "PartitionKey eq @d" + (" and Kind eq @k" if self._kind else "")
        for day in self._partitions:
            parameters = {"d": day, **({"k": self._kind} if self._kind else {})}
            for e in self._table.query_entities(where, parameters=parameters,
                                                results_per_page=200):
                if read == ALERT_SCAN:
                    self.cut = True
                    return
                read += 1
                yield _stored(e)


class TableAlertStore:
    def __init__(self, table: TableClient, retention: timedelta = timedelta(days=90)) -> None:
        self._table = table
        self._retention = retention
        # The cut-off day before which this instance found nothing left to delete.
        self._clean_before: str | None = None

    def raise_alert(self, alert: OperatorAlert) -> None:
        # Raised before, its row is there, and its log event went before the row was written:
        # nothing to do (an alert rule would otherwise notify again in a later window).
        if not rolled_up(alert) and self._raised_before(alert):
            return
        # The log event goes first: at least once is what an alert rule needs (a replay may log
        # it twice, with the same key); the row is written once.
        log.error(
            "OPERATOR_ALERT %s order=%s step=%s: %s", alert.kind.value, alert.order_id,
            alert.step, alert.reason,
            # Flat keys: the OpenTelemetry log exporter turns each into a customDimensions
            # entry (a nested dict would arrive as one string).
            extra={"alert": alert.kind.value, "order_id": alert.order_id,
                   "step": alert.step or "", "reason": alert.reason,
                   "alert_key": alert.key or ""},
        )
        if rolled_up(alert):
            self._roll_up(alert)
            self._expire(min(alert.at, datetime.now(UTC)) - self._retention)
            return
        # Raised before (a replay at the same time) when the row exists: the operator has it.
        with contextlib.suppress(ResourceExistsError):
            self._table.create_entity({
                "PartitionKey": alert_partition(alert.at),
                "RowKey": alert_row_key(alert),
                "Kind": alert.kind.value,
                "OrderID": alert.order_id,
                "Step": alert.step or "",
                "Reason": alert.reason[:4000],
                "RaisedAt": alert.at,
                "AlertKey": alert.key,
            })
        # Never past now: an alert's time that lay in the future would expire today's rows.
        self._expire(min(alert.at, datetime.now(UTC)) - self._retention)

    def _roll_up(self, alert: OperatorAlert) -> None:
        """Count the alert on its kind's and source's row of the day, which then shows it as
        the latest; a copy of the latest (the same key) is not counted again."""
        day, row = alert_partition(alert.at), alert_row_key(alert)
        latest = {"OrderID": alert.order_id, "Step": alert.step or "",
                  "Reason": alert.reason[:4000], "LastRaisedAt": alert.at,
                  "AlertKey": alert.key}
        for attempt in range(ROLL_UP_TRIES):
            if attempt:
                time.sleep(random.uniform(0, ROLL_UP_PAUSE * attempt))
            try:
                e = self._table.get_entity(day, row)
            except ResourceNotFoundError:
                with contextlib.suppress(ResourceExistsError):  # else another's came first
                    self._table.create_entity({
                        "PartitionKey": day, "RowKey": row, "Kind": alert.kind.value,
                        "Source": alert.source, "RaisedAt": alert.at, "Count": 1, **latest})
                    return
                continue
            if alert.key and e.get("AlertKey") == alert.key:
                return
            # Replaced whole: an acknowledgement of the earlier ones goes, as new ones came.
            counted = {"PartitionKey": day, "RowKey": row, "Kind": e.get("Kind"),
                       "Source": e.get("Source"), "RaisedAt": e.get("RaisedAt"),
                       "Count": int(e.get("Count") or 1) + 1, **latest}
            try:
                self._table.update_entity(counted, mode=UpdateMode.REPLACE,
                                          etag=e.metadata["etag"],
                                          match_condition=MatchConditions.IfNotModified)
                return
            except ResourceModifiedError:
                continue
        # The row is there, counted by the others at once: this one's count is lost, not the
        # alert.
        log.warning("alert %s from %s: its day's row was busy; not counted", alert.kind.value,
                    alert.source)

    def _raised_before(self, alert: OperatorAlert) -> bool:
        """Whether a row of this key is there from the same day or the day before: an alert
        raised again at another time (a redelivered message, a restarted Supervisor) has a row
        key of its own, and would be listed, open, a second time.

        At most one request a day partition, whatever the table holds: the first page of a
        query within the partition (the service may end a page early, after 1,000 rows read or
        5 s, and an alert unseen then gets a second row: a duplicate, never a lost alert). A
        failed look is no reason not to record the alert: it says not raised."""
        if not alert.key:
            return False
        for day in (alert_partition(alert.at), alert_partition(alert.at - timedelta(days=1))):
            try:
                page: Iterable[Any] = next(self._table.query_entities(
                    "PartitionKey eq @day and AlertKey eq @key",
                    parameters={"day": day, "key": alert.key}, select=["RowKey"],
                    results_per_page=1).by_page(), [])
                if any(True for _ in page):
                    return True
            except AzureError as e:
                log.warning("looking for alert %s raised before: %s", alert.key, e)
                return False
        return False

    def _expire(self, before: datetime) -> None:
        cut_off = alert_partition(before)
        if cut_off == self._clean_before:
            return  # nothing older was left when this instance last looked
        # Whole days before the cut-off's: one range over the day partitions, oldest first.
        try:
            page: Iterable[dict[str, Any]] = next(self._table.query_entities(
                f"PartitionKey lt '{cut_off}'", select=["PartitionKey", "RowKey"],
                results_per_page=EXPIRE_PER_ALERT).by_page(), [])
            rows = list(page)
            for row in rows:
                with contextlib.suppress(ResourceNotFoundError):  # another's, at once
                    self._table.delete_entity(row["PartitionKey"], row["RowKey"])
            if len(rows) < EXPIRE_PER_ALERT:
                self._clean_before = cut_off
        except AzureError as e:  # the alert itself is recorded; the next one tries again
            log.warning("expiring operator alerts: %s", e)

    def recent(self, today: datetime, days: int, kind: str | None = None) -> AlertScan:
        return _TableScan(self._table, days_back(today, days), kind)

    def of_order(self, order_id: str, today: datetime, days: int) -> list[StoredAlert]:
        out: list[StoredAlert] = []
        for day in reversed(days_back(today, days)):  # one query per day's partition
            rows = [_stored(e) for e in self._table.query_entities(
                "PartitionKey eq @d and OrderID eq @o", parameters={"d": day, "o": order_id})]
            out += sorted(rows, key=lambda a: _iso(a.raised_at or ""))
        return out

    def acknowledge(self, day: str, row: str, by: str, note: str | None,
                    at: datetime) -> StoredAlert:
        alert_id = f"{day}.{row}"
        try:
            e = self._table.get_entity(day, row)
        except ResourceNotFoundError:
            raise AlertNotFound(alert_id) from None
        if e.get("AcknowledgedAt") is not None:
            raise AckRefused(f"alert {alert_id} was acknowledged by {e.get('AcknowledgedBy')} "
                             f"at {_iso(e.get('AcknowledgedAt'))}")
        ack = {"PartitionKey": day, "RowKey": row, "AcknowledgedBy": by,
               "AcknowledgedAt": at, "AckNote": note}
        try:
            # Only the row as read: two operators at once, one wins and the other is told.
            self._table.update_entity(ack, mode=UpdateMode.MERGE, etag=e.metadata["etag"],
                                      match_condition=MatchConditions.IfNotModified)
        except ResourceModifiedError:
            raise AckRefused(f"alert {alert_id} changed meanwhile (acknowledged by someone "
                             "else?); look again") from None
        return _stored({**e, **ack})
