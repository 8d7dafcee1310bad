"""The operator-side tables as earlier releases wrote them are read by this one (issue #30).

Each fixture in ``fixtures/operator/`` holds rows an earlier release's own code wrote
(make_operator_fixtures.py runs that release, taken from git, against Azurite): alert rows,
rejected rows, the Supervisor's tick log. The tests write them into a fresh pipeline of this
release and read them through the paths an operator and the Supervisor use:

- alerts: the operator API's list (``Operator.alerts``, also ``orders alerts``), an order's
  alerts (``Operator.alerts_for``: ``orders trace``) and the console's overview, each row with
  its kind, order, step, reason and time; and each acknowledged by the id it is listed with;
- rejected rows: the API's list page by page (``Operator.rejected``, also ``orders rejected``),
  the look-up by message id (``orders watch``), the overview; and their expiry: kept
  within RejectedRetentionDays, deleted past it by the next rejection recorded;
- the tick log: read as it was written, continued by this release's Supervisor, and an outage
  it recorded still excuses a step whose time fell in it.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from shared.adapters.tick_log import TableTickLog
from shared.domain.alerts import AlertKind
from shared.domain.outages import Gap
from tests.integration.conftest import Pipeline
from tests.integration.helpers import drain, entities, order
from tests.upgrade.test_legacy_shapes import from_odata

FIXTURES = Path(__file__).parent / "fixtures" / "operator"
TABLE_SETTINGS = {"OperatorAlerts": "OperatorAlertsTableName",
                  "RejectedOrders": "RejectedOrdersTableName",
                  "OrdersInFlight": "InFlightTableName"}


def fixtures(kind: str) -> list[Path]:
    found = sorted(FIXTURES.glob(f"{kind}_*.json"))
    assert found, f"no {kind} fixtures in {FIXTURES}"
    return found


def load(path: Path) -> dict[str, Any]:
    fx: dict[str, Any] = json.loads(path.read_text())
    return fx


def install(p: Pipeline, fx: dict[str, Any]) -> list[dict[str, Any]]:
    """Write the fixture's rows as the upgrade finds them (replacing any of the same key);
    the rows, as the SDK gives them."""
    table = p.container.tables.get_table_client(p.env[TABLE_SETTINGS[fx["where"]["table"]]])
    rows = [from_odata(e) for e in fx["entities"]]
    for row in rows:
        table.upsert_entity(row)
    return rows


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def as_sent(view: BaseModel) -> Any:
    """A view as the API sends it."""
    return view.model_dump(mode="json")


# -- alerts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", fixtures("alert-row"), ids=lambda p: p.stem)
def test_old_alert_rows_are_listed_by_the_api_the_cli_and_the_console(
        path: Path, pipeline: Pipeline) -> None:
    fx = load(path)
    rows = install(pipeline, fx)
    op = pipeline.container.operator
    pipeline.clock.now = at(fx["now"]) + timedelta(hours=1)
    wanted = sorted((r["Kind"], r["OrderID"], r["Step"], r["Reason"], r["RaisedAt"])
                    for r in rows)

    def seen(views: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((v["Kind"], v["OrderID"], v["Step"], v["Reason"], at(v["RaisedAt"]))
                      for v in views if v["OrderID"] == fx["order_id"])

    listed = as_sent(op.alerts(limit=50))["alerts"]
    assert seen(listed) == wanted
    json.dumps(listed)  # the API's body as it is sent
    assert seen([as_sent(a) for a in op.alerts_for(fx["order_id"])]) == wanted
    overview = as_sent(op.overview())
    assert seen(overview["Alerts"]) == wanted
    # A later day's list still reaches them (one partition a day, seven days back).
    pipeline.clock.now += timedelta(days=6)
    assert seen(as_sent(op.alerts(limit=50))["alerts"]) == wanted


# The first release's alert row keys end in 8 hex digits (a random part), today's in 12: the
# acknowledgement takes the id the list gives either (shared/handlers/operator.py, _ALERT_ID).
@pytest.mark.parametrize("path", fixtures("alert-row"), ids=lambda f: f.stem)
def test_old_alert_rows_can_be_acknowledged_by_the_id_they_are_listed_with(
        path: Path, pipeline: Pipeline) -> None:
    fx = load(path)
    rows = install(pipeline, fx)
    op = pipeline.container.operator
    pipeline.clock.now = at(fx["now"]) + timedelta(hours=1)
    listed = [a for a in as_sent(op.alerts(limit=50))["alerts"]
              if a["OrderID"] == fx["order_id"]]
    assert len(listed) == len(rows)
    for a in listed:
        acked = op.acknowledge(a["AlertId"], "operator@example.com", "seen after the upgrade")
        assert acked.AcknowledgedBy == "operator@example.com"
    assert {a.AlertId for a in op.alerts(limit=50, acknowledged=True).alerts} == \
        {a["AlertId"] for a in listed}
    assert not [a for a in op.overview().Alerts if a.OrderID == fx["order_id"]]


# The tests above read only the kinds the fixtures hold: four kinds once had no row here
# (RecordUnreadable, SupervisionFailing, OrderNotStorable, RequestRefused). A kind added later
# fails this until its release has run a scenario of make_operator_fixtures.py.
def test_every_alert_kind_has_a_row_an_earlier_release_wrote() -> None:
    written = {e["Kind"] for path in fixtures("alert-row") for e in load(path)["entities"]}
    assert {k.value for k in AlertKind} - written == set()


# -- rejected rows --------------------------------------------------------------------------


def _rejected_seen(views: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((v["MessageId"], v["Kind"], v["Reason"], at(v["RejectedAt"])) for v in views)


@pytest.mark.parametrize("path", fixtures("rejection-row"), ids=lambda p: p.stem)
def test_old_rejected_rows_are_listed_paged_and_found(path: Path, pipeline: Pipeline) -> None:
    fx = load(path)
    rows = install(pipeline, fx)
    op = pipeline.container.operator
    pipeline.clock.now = at(fx["now"]) + timedelta(hours=1)
    wanted = sorted((r["MessageId"], r["Kind"], r["Reason"], r["RejectedAt"]) for r in rows)

    assert _rejected_seen(as_sent(op.rejected(50))["rejected"]) == wanted
    # Page by page, as `orders rejected --limit 1` and the API's continuation go.
    paged: list[dict[str, Any]] = []
    token = None
    for _ in range(len(rows) + 2):
        page = op.rejected(1, token)
        paged += as_sent(page)["rejected"]
        token = page.continuation
        if not token:
            break
    assert _rejected_seen(paged) == wanted
    for r in rows:
        found = op.rejection(r["MessageId"])
        assert found is not None and found.Reason == r["Reason"], r["MessageId"]
    assert _rejected_seen(as_sent(op.overview())["Rejected"]) == wanted


# The first release keyed a rejected row by a content digest; expiry's second range (below any
# countdown a message sent by now can have: shared/adapters/rejections.py, _expire) reaches the
# digests that sort below the countdown (one starting 0-7: about half of them).
@pytest.mark.parametrize("path", fixtures("rejection-row"), ids=lambda f: f.stem)
def test_old_rejected_rows_are_kept_for_their_retention_then_expire(
        path: Path, make_pipeline: Any) -> None:
    fx = load(path)
    p: Pipeline = make_pipeline(RejectedRetentionDays="30")
    rows = install(p, fx)
    op, intake = p.container.operator, p.container.intake
    rejected_at = max(r["RejectedAt"] for r in rows)

    # Within its retention, a new rejection leaves the old rows listed.
    p.clock.now = rejected_at + timedelta(days=29)
    intake.handle("m-later", b"not an order")
    ids = {v.MessageId for v in op.rejected(50).rejected}
    assert ids == {*(r["MessageId"] for r in rows), "m-later"}

    # Past it, the next rejection recorded deletes them; the newer one stays.
    p.clock.now = rejected_at + timedelta(days=31)
    intake.handle("m-much-later", b"still not an order")
    left = {e["MessageId"] for e in entities(p.env["RejectedOrdersTableName"])}
    assert left == {"m-later", "m-much-later"}


# -- the Supervisor's tick log --------------------------------------------------------------


@pytest.mark.parametrize("path", fixtures("tick-log"), ids=lambda p: p.stem)
def test_an_old_tick_log_is_read_continued_and_its_outage_still_excuses(
        path: Path, make_pipeline: Any) -> None:
    fx = load(path)
    p: Pipeline = make_pipeline(OutageGapSeconds="25")
    (row,) = install(p, fx)  # over the record the new pipeline's first tick wrote
    c = p.container
    ticks = TableTickLog(c.tables.get_table_client(p.env["InFlightTableName"]))

    log, version = ticks.read()
    assert version is not None
    assert log.last_tick == row["LastTick"]
    gaps = [Gap(at(a), at(b)) for a, b in json.loads(row["Gaps"])]
    assert list(log.gaps) == gaps
    outage = gaps[-1]  # the two minutes the old release's Supervisor did not tick
    assert outage.end - outage.start > timedelta(seconds=25)

    # An order sent in that outage, its request lost: its time ran out in the outage, so this
    # release's Supervisor sends it again without counting a failure, naming that outage.
    p.clock.now = outage.start + timedelta(seconds=20)
    oid = "up-tick-log"
    c.intake.handle(f"m-{oid}", json.dumps(order(oid)).encode())
    for command in drain(p.env["SchedulerQueueName"]):  # intake dispatches the first step
        c.scheduler.handle_command(command)
    assert drain(p.env["InventoryRequestsQueueName"])  # lost
    p.clock.now = row["LastTick"] + timedelta(seconds=5)  # no new gap: the last tick is old
    report = c.supervisor.tick()
    assert report.excused == 1, report
    state = c.store.get_state(oid)
    assert state is not None and state.failure_count == 0
    outage_text = f"during an outage ({outage.start:%H:%M:%S} to {outage.end:%H:%M:%S})"
    assert any(outage_text in json.dumps(e) for e in state.timeline), state.timeline

    # The tick went on from the old record: its gaps kept, its last tick this one.
    after, _ = ticks.read()
    assert after.last_tick == p.clock.now
    assert set(gaps) <= set(after.gaps)
