"""Writes tests/upgrade/fixtures/operator/*.json: the operator-side tables as earlier releases
wrote them (issue #30).

make_fixtures.py keeps what an order in flight leaves (state record, index entry, messages);
this keeps the rest an upgrade finds: the ``OperatorAlerts`` rows, the ``RejectedOrders`` rows
and the Supervisor's tick log (``supervisor/ticks`` in the in-flight table). Each scenario runs
the release's own ``shared`` package, taken from git (``git archive <commit> shared``), in a
subprocess of its own (release_runner.py) against Azurite, exactly as make_fixtures.py does,
and keeps the rows it wrote in the table under test. Nothing in a fixture is written by hand or
by this release's code. ``test_operator_tables.py`` reads each with this release.

The shapes, from ``git log`` of shared/adapters/alerts.py, rejections.py and tick_log.py (and
shared/domain/outages.py, which serialises the tick log's gaps):

- alert rows: d227dda (row key ``<countdown>-<random>``, no ``AlertKey``); 75e3701 on (row key
  ``<countdown>-<hash of the key>``, ``AlertKey``), unchanged since;
- rejected rows: d227dda (row key a 40-character content digest); f037ed7 (row key
  ``<countdown from when it was sent>-<digest>``); a10c082 on (``BodyBytes``, ``BodySha256``,
  the body clipped by UTF-16 units), unchanged since;
- the tick log: 30a0e57 on (``LastTick``, ``Gaps`` as JSON pairs of ISO times, the first
  from ``0001-01-01`` before any recorded tick), unchanged since.

    .venv/bin/python -m tests.upgrade.make_operator_fixtures            # all
    .venv/bin/python -m tests.upgrade.make_operator_fixtures NAME ...   # only these scenarios
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.upgrade.make_fixtures import ORDER, ROOT, RUNNER, _env, _release, _subject

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "operator"

# Refused the charge, then the undo of the reservation refused too: an OrderFailed and a
# CompensationFailed alert; then the same order id with other content (a conflict: a rejected
# row and an OrderConflict alert) and a message that is not JSON (a rejected row).
FAILED_THEN_BAD_INPUT = [
    ["intake"], ["command"], ["agent", "inventory"], ["reply"],
    ["agent", "payment", "refuse"], ["reply"], ["agent", "inventory", "refuse"], ["reply"],
    ["intake-body", "m-conflict", "CONFLICT"], ["intake-body", "m-not-json", "{oops"]]
BAD_INPUT = [["intake"], ["intake-body", "m-conflict", "CONFLICT"],
             ["intake-body", "m-not-json", "{oops"]]


@dataclass(frozen=True)
class Keep:
    file: str
    kind: str  # alert-row, rejection-row or tick-log
    shape: str
    table: str  # the table's role: OperatorAlerts, RejectedOrders or OrdersInFlight
    partition: str | None = None  # only the rows of this partition


@dataclass(frozen=True)
class Scenario:
    name: str
    commit: str
    description: str
    script: list[list[Any]]
    keep: list[Keep]
    env: dict[str, str] | None = None


SCENARIOS = [
    Scenario(
        "d227dda-alerts-and-rejections", "d227dda",
        "The charge refused and the undo of the reservation refused: OrderFailed and "
        "CompensationFailed alerts; the same order id sent again with other content "
        "(OrderConflict, a conflict row) and a message that is not JSON (an invalid row).",
        FAILED_THEN_BAD_INPUT,
        [Keep("alert-row_d227dda_no-alert-key", "alert-row",
              "alert row of the first release: RowKey <countdown>-<random hex>, Kind, OrderID, "
              "Step, Reason, RaisedAt; no AlertKey", "OperatorAlerts"),
         Keep("rejection-row_d227dda_digest-key", "rejection-row",
              "rejected row of the first release: RowKey a 40-character content digest (not "
              "newest first), no BodyBytes or BodySha256", "RejectedOrders")]),
    Scenario(
        "75e3701-alerts", "75e3701",
        "As d227dda-alerts-and-rejections, at the release that gave alerts a key.",
        FAILED_THEN_BAD_INPUT,
        [Keep("alert-row_75e3701_alert-key", "alert-row",
              "alert row with AlertKey and RowKey <countdown>-<hash of the key> (75e3701 on, "
              "today's shape)", "OperatorAlerts")]),
    Scenario(
        "f037ed7-rejections", "f037ed7",
        "A conflict and a message that is not JSON, at the release that pages rejections "
        "newest sent first.",
        BAD_INPUT,
        [Keep("rejection-row_f037ed7_countdown-key", "rejection-row",
              "rejected row with RowKey <countdown from when it was sent>-<digest> "
              "(f037ed7), no BodyBytes or BodySha256", "RejectedOrders")]),
    Scenario(
        "a10c082-rejections", "a10c082",
        "A conflict and a message that is not JSON, at the release that sized the body.",
        BAD_INPUT,
        [Keep("rejection-row_a10c082_body-digest", "rejection-row",
              "rejected row with BodyBytes and BodySha256, Body clipped by UTF-16 units "
              "(a10c082 on, today's shape)", "RejectedOrders")]),
    Scenario(
        "30a0e57-tick-log", "30a0e57",
        "The Supervisor's first tick (a gap from before any recorded tick), one 5 s later, "
        "then one after two minutes without a tick: an outage, recorded as a gap.",
        [["tick", 5], ["tick", 120]],
        [Keep("tick-log_30a0e57_outage", "tick-log",
              "supervisor/ticks with LastTick and Gaps (JSON [[start, end], ...], the first "
              "from 0001-01-01: before the first recorded tick) (30a0e57 on, today's shape)",
              "OrdersInFlight", partition="supervisor")],
        env={"OutageGapSeconds": "25"}),
]


def generate(scenario: Scenario, workdir: Path, connection: str) -> list[Path]:
    tree = _release(scenario.commit, workdir)
    env, roles, tables = _env(connection)
    env.update(scenario.env or {})
    tables = {**tables, "OperatorAlerts": env["OperatorAlertsTableName"],
              "RejectedOrders": env["RejectedOrdersTableName"]}
    order_id = f"up-{scenario.name}"
    order = {"order_id": order_id, **ORDER}
    conflict = json.dumps({**order, "customer_id": "someone-else"})
    script = [[*step[:2], conflict] if step[:1] == ["intake-body"] and step[2] == "CONFLICT"
              else step for step in scenario.script]
    spec = {"env": env, "roles": roles, "tables": tables, "script": script, "order": order}
    run = subprocess.run([sys.executable, str(RUNNER), json.dumps(spec)], cwd=tree,
                         env={**env, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"},
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{scenario.name} at {scenario.commit} failed:\n{run.stderr[-4000:]}")
    snapshot = json.loads(run.stdout.strip().splitlines()[-1])
    written = []
    for keep in scenario.keep:
        rows = [r for r in snapshot["tables"][keep.table]
                if keep.partition is None or r["PartitionKey"] == keep.partition]
        if not rows:
            raise SystemExit(f"{scenario.name}: {scenario.commit} wrote no {keep.table} rows")
        fixture = {
            "commit": scenario.commit,
            "commit_subject": _subject(scenario.commit),
            "kind": keep.kind,
            "shape": keep.shape,
            "description": scenario.description,
            "order_id": order_id,
            "now": snapshot["now"],
            "where": {"table": keep.table},
            "entities": rows,
            "written_by": f"tests/upgrade/make_operator_fixtures.py, scenario "
                          f"{scenario.name!r}: the code of {scenario.commit} (git archive), "
                          f"run against Azurite",
        }
        path = FIXTURES / f"{keep.file}.json"
        path.write_text(json.dumps(fixture, indent=2, ensure_ascii=False) + "\n")
        written.append(path)
    return written


def main(names: list[str]) -> None:
    from localrun.azurite import Azurite

    chosen = [s for s in SCENARIOS if not names or s.name in names]
    FIXTURES.mkdir(parents=True, exist_ok=True)
    az = Azurite.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for scenario in chosen:
                for path in generate(scenario, Path(tmp), az.connection_string):
                    print(f"{scenario.commit}  {path.relative_to(ROOT)}")
    finally:
        az.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
