"""Every shape an earlier release wrote is read by this one, and its order settles (issue #30).

Each fixture in ``fixtures/`` is what an earlier release's own code left in storage for one
order in flight (make_fixtures.py runs that release, taken from git, against Azurite): its
state record, order row and index entry in their tables, the messages still on its queues, and
the work its remote services hold. One shape in it is the one under test (``entity`` or
``message``). The test writes all of it into a fresh pipeline of this release, as an upgrade
finds it, and runs the order with this release's Scheduler, Agents and Supervisor until it
settles:

- to the end the fixture expects: Processed; or Error with the compensation Done; or, where
  a fact was never recorded (work done under a key no record holds), the compensation Failed
  with an operator alert naming the step. Never a silent Done;
- with no work standing twice at the services (tests/model's ModelServices holds the effects
  by key, seeded with what the earlier release did), and nothing left standing by a
  compensation that says Done;
- where the messages in flight should carry the order on their own, with no recovery by the
  Supervisor: a message this release ignored or misread would show as one;
- with no index entry of the order left behind, old or new.

A shape this release could not read fails here: its message or record raises, or the order
never settles.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from azure.data.tables import EdmType, EntityProperty
from azure.storage.queue import QueueServiceClient

from shared.circuit_breaker import CircuitBreaker
from shared.domain.messages import Action
from shared.domain.services import Call
from shared.domain.state import ProcessState
from shared.handlers.agent import Agent, AgentRetryPolicy
from shared.handlers.intake import IntakeOutcome
from shared.handlers.supervisor import TickReport
from tests.integration.conftest import Pipeline
from tests.integration.helpers import drain, enqueue, entities
from tests.model.test_guarantees import ModelServices

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))
QUEUE_SETTINGS = {"scheduler": "SchedulerQueueName", "responses": "AgentResponsesQueueName",
                  "inventory": "InventoryRequestsQueueName",
                  "payment": "PaymentRequestsQueueName",
                  "shipping": "ShippingRequestsQueueName",
                  # the second workflow's service (digital-delivery, 14ccb65 on)
                  "email": "EmailRequestsQueueName"}
TABLE_SETTINGS = {"OrderState": "StateTableName", "OrdersInFlight": "InFlightTableName"}
AGENTS = ("inventory", "payment", "shipping", "email")
# Time the test lets pass when nothing is left to do but wait for the Supervisor.
IDLE_STEP_SECONDS = 60
MAX_ROUNDS = 80


class PlannedService:
    """A remote service after the upgrade, as providers behave (tests/model's ModelServices: a
    key's first answer is its answer, an undo names the id of the work it undoes), some
    operations refused as the fixture plans (``<service>/<operation>``)."""

    def __init__(self, service: str, model: ModelServices, refuse: set[str],
                 undo_keys: dict[str, set[str]]) -> None:
        self._service = service
        self._model = model
        self._refuse = refuse
        self._undo_keys = undo_keys  # the work's key -> every key its undo was sent under

    def call(self, c: Call, timeout: float) -> dict[str, Any]:
        if c.action is Action.UNDO:
            self._undo_keys.setdefault(c.compensates or "", set()).add(c.key)
        self._model.log.append(f"{self._service} {c.operation} {c.compensates or c.key} "
                               f"{c.result} for {c.order_id}")
        refuse = f"{self._service}/{c.operation}" in self._refuse
        if c.action is Action.UNDO:
            # These services speak the HTTP contract the earlier releases were made against,
            # whose undo names the work by its key (compensates): an undo the earlier release
            # had under way goes on with no result (that release kept none), and finds the work
            # by its key; for a key never done (the earlier releases voided a refused step's
            # key) it succeeds with nothing to undo, and late work under the key is refused.
            target = (self._service, c.compensates or "")
            result = c.result if c.result is not None else self._model.answers.get(target)
            if result is None and not refuse:
                self._model.answers[target] = f"HTTP 409 {c.compensates} was voided"
                voided = self._model.answers[(self._service, c.key)] = {
                    "status": "voided", "key": c.compensates}
                return voided
            return self._model.undo(self._service, c.key, result, refuse=refuse)
        return self._model.do(self._service, c.key, c.order_id, c.step, refuse=refuse)


def seed(model: ModelServices, work_done: list[dict[str, Any]]) -> None:
    """The work the earlier release's services hold, as the model keeps it: each key's first
    answer (an id for work done; a refusal for a key the old simulated services voided, whose
    late work they refused) and each piece of work's status."""
    for w in work_done:
        service, key = w["effect"].split("/", 1)
        if w["status"] == "voided":
            model.answers[(service, key)] = f"HTTP 409 {key} was voided"
            continue
        work = f"{service}-{len(model.status) + 1}"
        model.status[work] = w["status"]  # applied, or undone
        model.owner[work] = (w["order"], w["step"])
        model.answers[(service, key)] = {"id": work}


def from_odata(entity: dict[str, Any]) -> dict[str, Any]:
    """A Table Storage entity from its JSON (``@odata.type`` annotations) to the SDK's values."""
    out: dict[str, Any] = {}
    for k, v in entity.items():
        if k.endswith("@odata.type"):
            continue
        kind = entity.get(f"{k}@odata.type")
        if kind == "Edm.DateTime":
            out[k] = datetime.fromisoformat(v)
        elif kind == "Edm.Int64":
            out[k] = EntityProperty(int(v), EdmType.INT64)
        else:
            out[k] = v
    return out


def compact(message: dict[str, Any]) -> str:
    """A message body as the releases' pydantic models wrote it (model_dump_json)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def install(p: Pipeline, fx: dict[str, Any]) -> None:
    """Write the fixture into this pipeline's tables and queues, as the upgrade finds them."""
    tables = {role: p.container.tables.get_table_client(p.env[s])
              for role, s in TABLE_SETTINGS.items()}
    rows = {role: list(items) for role, items in fx["context"]["tables"].items()}
    queues = {role: list(items) for role, items in fx["context"]["queues"].items()}
    if "entity" in fx:
        rows.setdefault(fx["where"]["table"], []).append(fx["entity"])
    else:
        queues.setdefault(fx["where"]["queue"], []).insert(0, fx["message"])
    for role, items in rows.items():
        for e in items:
            tables[role].create_entity(from_odata(e))
    for role, items in queues.items():
        for m in items:
            enqueue(p.env[QUEUE_SETTINGS[role]], compact(m))


def waiting(p: Pipeline) -> bool:
    """Whether a queue holds a message not visible yet (a command held back for a backoff)."""
    service = QueueServiceClient.from_connection_string(p.env["AzureWebJobsStorage"])
    return any(service.get_queue_client(p.env[s]).get_queue_properties()
               .approximate_message_count for s in QUEUE_SETTINGS.values())


def pump(p: Pipeline) -> int:
    """Hand every visible message to this release's functions, as the host would; how many."""
    c, handled = p.container, 0
    for role in ("scheduler", "responses", *AGENTS):
        queue = p.env[QUEUE_SETTINGS[role]]
        for body in drain(queue):
            handled += 1
            if role == "scheduler":
                c.scheduler.handle_command(body)
            elif role == "responses":
                c.scheduler.handle_reply(body)
            else:
                reply = c.agents[role].handle(body)
                if reply is not None:  # the output binding sends it after the return
                    enqueue(p.env["AgentResponsesQueueName"], reply.to_json())
    return handled


def recoveries(r: TickReport) -> int:
    return r.retried + r.failed + r.rescued + r.redispatched + r.excused


def run_to_the_end(p: Pipeline, order_id: str) -> int:
    """Run the order until it settles and nothing more comes of it; the Supervisor's
    recoveries on the way."""
    c, recovered = p.container, 0
    for _ in range(MAX_ROUNDS):
        if pump(p):
            continue
        state = c.store.get_state(order_id)
        assert state is not None
        if state.is_settled:
            return recovered
        if waiting(p):
            time.sleep(0.2)  # a backoff held in the queue's own (real) time
            continue
        p.clock.advance(seconds=IDLE_STEP_SECONDS)
        recovered += recoveries(c.supervisor.tick())
    raise AssertionError(f"{order_id} did not settle: {c.store.get_state(order_id)}")


def index_entries_of(p: Pipeline, order_id: str) -> list[str]:
    return [f"{e['PartitionKey']}/{e['RowKey']}"
            for e in entities(p.env["InFlightTableName"])
            if e["PartitionKey"] != "supervisor" and order_id in e["RowKey"]]


# Shapes this release reads but whose orders do not end as they must: the engine's to fix
# (docs/upgrades.md, InHand gap). strict: a fix shows here as an unexpected pass.
KNOWN_GAPS: dict[str, str] = {}


def _params() -> list[Any]:
    return [pytest.param(f, id=f.stem, marks=[pytest.mark.xfail(
        strict=True, reason=KNOWN_GAPS[f.stem])] if f.stem in KNOWN_GAPS else [])
        for f in FIXTURES]


@pytest.mark.parametrize("path", _params())
def test_an_order_in_flight_at_the_upgrade_settles(path: Path, make_pipeline: Any) -> None:
    fx = json.loads(path.read_text())
    oid, expect = fx["order_id"], fx["expect"]
    p: Pipeline = make_pipeline(FailureThreshold="3", RetryBackoffSeconds="1",
                                RetryBackoffMaxSeconds="1", PendingGraceSeconds="10",
                                CompensationFailureThreshold="3")
    c = p.container
    p.clock.now = datetime.fromisoformat(fx["context"]["now"])
    model = ModelServices()
    seed(model, fx["work_done"])
    refuse = set(fx["after_upgrade"].get("refuse", []))
    undo_keys: dict[str, set[str]] = {}
    for m in [fx.get("message") or {}, *(x for q in fx["context"]["queues"].values() for x in q)]:
        if m.get("action") == "undo" and "idempotency_key" in m:  # an undo request sent before
            work = m.get("compensates") or m["idempotency_key"].removesuffix(".undo") + ".do"
            undo_keys.setdefault(work, set()).add(m["idempotency_key"])
    for name in AGENTS:
        c.agents[name] = Agent(
            name=name,
            client=PlannedService(name, model, refuse, undo_keys),  # type: ignore[arg-type]
            policy=AgentRetryPolicy(base_delay=1, max_delay=4, call_timeout=5),
            breaker=CircuitBreaker(name, 10**6, 1), clock=p.clock,
            check=c.agents[name]._check, sleep=lambda s: p.clock.advance(seconds=s))
    install(p, fx)

    if fx["after_upgrade"].get("redeliver_order"):
        # The sender's message comes again: the stored order must read as the same order.
        (row,) = entities(p.env["StateTableName"], "PartitionKey eq @p and RowKey eq 'order'",
                          p=oid)
        doc = json.loads(row["Document"])
        result = c.intake.handle(f"m-{oid}", json.dumps(doc).encode())
        assert result.outcome is IntakeOutcome.DUPLICATE, result

    recovered = run_to_the_end(p, oid)
    state = c.store.get_state(oid)
    assert state is not None
    story = "\n".join([f"{s.name}: {s.status} {s.work_key} {s.last_error}" for s in state.steps]
                      + model.log)
    assert state.process_state is ProcessState(expect["ProcessState"]), story
    assert (state.compensation.value if state.compensation else None) == \
        expect["Compensation"], story
    if "FailureCount" in expect:
        assert state.failure_count == expect["FailureCount"], story
    if "supervisor_recoveries" in expect:
        assert recovered == expect["supervisor_recoveries"], story
    # Work done once or undone: nothing stands twice, and a compensation that says Done left
    # nothing standing (work left by the release before, which it could not undo, stays).
    assert dict(model.standing(oid)) == expect["standing"], story
    assert max(model.standing(oid).values(), default=0) <= 1, story
    # One key for each undo, whichever release sent it (a provider de-duplicates refunds by
    # key: two keys, two refunds). Releases before ea50bdd keyed an undo <work key>.undo, which
    # no later release derives: such an undo in flight at an upgrade from them is the
    # exception, and the service's undo by the result it gave is what keeps it single.
    twice = {w: sorted(k) for w, k in undo_keys.items()
             if len({x for x in k if not x.endswith(".do.undo")}) > 1}
    assert not twice, f"an undo sent under two keys: {twice}\n{story}"

    alerts = [a for a in entities(p.env["OperatorAlertsTableName"]) if a["OrderID"] == oid]
    wanted = expect.get("alert")
    if wanted:
        assert any(a["Kind"] == wanted["kind"] and a["Step"] == wanted["step"]
                   and wanted["reason"] in a["Reason"] for a in alerts), alerts
    else:
        # RequestRefused: a request or reply of the release before (its attempt's token, from
        # 4ec0fd8 on) taken for a forged one.
        assert not [a for a in alerts if a["Kind"] in (
            "CompensationFailed", "OrderConflict", "RecordUnreadable", "SupervisionFailing",
            "RequestRefused")], alerts

    # Nothing of the order stays in the index, neither the old release's entry nor this one's.
    p.clock.advance(seconds=IDLE_STEP_SECONDS)
    c.supervisor.tick()
    assert index_entries_of(p, oid) == []
    for setting in QUEUE_SETTINGS.values():
        assert drain(p.env[setting]) == []
