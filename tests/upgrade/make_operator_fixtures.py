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
  ``<countdown>-<hash of the key>``, ``AlertKey``), unchanged since; the kinds the first ones
  do not show, each from the release that added it: ``RecordUnreadable`` (75e3701) and
  ``SupervisionFailing`` (281a355), the Supervisor's, no step; ``OrderNotStorable`` (a10c082:
  intake, no step); ``RequestRefused`` (f9dc107: an Agent, with the step, key
  ``refused.<fingerprint of the request>``);
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

# Run in the release's process before its runner (``python -c`` with argv[1] the runner): the
# order intake parses made past what a stored property holds, as a10c082's own test of the
# alert did (tests/integration/test_intake.py, ..._storage_refuses_is_recorded_and_alerted...):
# its schema keeps every valid order within storage's limits, so only this seam reaches the
# path. The rest is the release's own: intake, its store's transaction, Azurite's refusal
# (PropertyValueTooLarge), the rejected row, the alert.
OVERSIZE = """
import runpy, sys
from shared.handlers import intake
parse = intake.parse_order
def oversize(body):
    return parse(body).model_copy(update={"customer_id": "x" * 40_000})
intake.parse_order = oversize
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


# Run before the runner: the payment step declares that a 402 needs a person (StepRetry.park,
# de0c925 on), and the runner's refusals answer 402, as a provider waiting for its customer
# does. The shipped workflows park on nothing; the rest is the release's own: its Agent, its
# Scheduler's park, its relay's alert.
PARK = """
import dataclasses, runpy, sys
import shared.workflows as shipped
from shared.adapters import remote_service
from shared.domain.step_policy import StepRetry
refused = remote_service.PermanentServiceError.__init__
def as_402(self, message, status=402):
    refused(self, message, status)
remote_service.PermanentServiceError.__init__ = as_402
waits = StepRetry(park={402: "the customer must confirm the payment"})
shipped.REGISTRY = dataclasses.replace(shipped.REGISTRY, workflows=tuple(
    dataclasses.replace(w, steps=tuple(dataclasses.replace(s, retry=waits)
                                       if s.service == "payment" else s for s in w.steps))
    for w in shipped.REGISTRY.workflows))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


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
    # The runner's role reads another role's queue: a message put on the wrong queue.
    queues: dict[str, str] | None = None
    prelude: str | None = None  # code run before the runner (OVERSIZE)


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
    Scenario(
        "a10c082-not-storable", "a10c082",
        "A valid order storage refuses for what it holds (a property past 32K units): intake "
        "records it as unstorable, raises OrderNotStorable and runs nothing.",
        [["intake"]],
        [Keep("alert-row_a10c082_order-not-storable", "alert-row",
              "OrderNotStorable alert row (a10c082 on): no step (Step ''), AlertKey "
              "<order>.unstorable.<fingerprint>", "OperatorAlerts"),
         Keep("rejection-row_a10c082_unstorable", "rejection-row",
              "rejected row of kind unstorable (a10c082 on), the body as sent with BodyBytes "
              "and BodySha256", "RejectedOrders")],
        prelude=OVERSIZE),
    Scenario(
        "f9dc107-request-refused", "f9dc107",
        "The reservation request put on the payment queue: the payment Agent finds the "
        "order's step is the inventory service's, refuses it without calling the service and "
        "raises RequestRefused.",
        [["intake"], ["agent", "payment"]],
        [Keep("alert-row_f9dc107_request-refused", "alert-row",
              "RequestRefused alert row (f9dc107 on): the step named, AlertKey "
              "refused.<fingerprint of the request>", "OperatorAlerts")],
        queues={"payment": "inventory"}),
    Scenario(
        "de0c925-order-parked", "de0c925",
        "The reservation made, then the charge answered 402, which the payment step declares "
        "needs a person: the order is parked and OrderParked raised, saying what is needed.",
        [["intake"], ["agent", "inventory"], ["reply"], ["agent", "payment", "refuse"],
         ["reply"]],
        [Keep("alert-row_de0c925_order-parked", "alert-row",
              "OrderParked alert row (de0c925 on): the step named, the reason the step's "
              "declared words, AlertKey <order>.<outbox seq>.<n>", "OperatorAlerts")],
        # The payment service is code from 14ccb65 on: its setting, though the runner's
        # services answer in its place.
        env={"PaymentProviderKey": "fixture", "PaymentProviderUrl": "http://127.0.0.1:9"},
        prelude=PARK),
    Scenario(
        "75e3701-record-unreadable", "75e3701",
        "The order's state record unreadable (a ProcessState no release knows): the "
        "Supervisor reports it once, RecordUnreadable, and skips it.",
        [["intake"], ["corrupt"], ["tick", 11]],
        [Keep("alert-row_75e3701_record-unreadable", "alert-row",
              "RecordUnreadable alert row (75e3701 on): no step, AlertKey "
              "<order>.unreadable.<the record's ETag>", "OperatorAlerts")]),
    Scenario(
        "281a355-supervision-failing", "281a355",
        "The start command lost and the Scheduler's queue gone: the Supervisor's re-dispatch "
        "fails three ticks running and it raises SupervisionFailing.",
        [["intake"], ["drop", "scheduler"], ["break", "scheduler"], ["tick", 11], ["tick", 11],
         ["tick", 11]],
        [Keep("alert-row_281a355_supervision-failing", "alert-row",
              "SupervisionFailing alert row (281a355 on): no step, AlertKey "
              "<order>.failing.<exception>.<day>", "OperatorAlerts")]),
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
    readers = {role: roles[source] for role, source in (scenario.queues or {}).items()}
    spec = {"env": env, "roles": {**roles, **readers}, "tables": tables, "script": script,
            "order": order}
    start = ["-c", scenario.prelude] if scenario.prelude else []
    run = subprocess.run([sys.executable, *start, str(RUNNER), json.dumps(spec)], cwd=tree,
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
