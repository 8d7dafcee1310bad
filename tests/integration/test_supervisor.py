"""The Supervisor against Azurite: reset, backoff, threshold, alert, rescue, races and cost."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.data.tables import UpdateMode
from azure.storage.queue import QueueServiceClient

from shared.domain.state import ProcessState
from shared.domain.transitions import receive
from shared.handlers.supervisor import TickReport
from shared.workflows.orders.message import parse_order
from tests.integration.conftest import Pipeline
from tests.integration.helpers import drain_json, entities, index_entries, order, race_on_save
from tests.integration.test_scheduler import accept, drain_json_eventually, reply, state


def visible_count(p: Pipeline, queue_setting: str) -> int:
    q = QueueServiceClient.from_connection_string(p.env["AzureWebJobsStorage"]) \
        .get_queue_client(p.env[queue_setting])
    return len(list(q.peek_messages(max_messages=32)))


def claimed_and_lost(p: Pipeline, order_id: str = "o-1") -> None:
    """An order whose step request vanished: claimed, dispatched, never answered."""
    p.container.scheduler.handle_command(accept(p, order_id))
    drain_json(p.env["AlphaRequestsQueueName"])


def test_overdue_step_is_reset_and_retried_after_a_backoff(pipeline: Pipeline) -> None:
    c = pipeline.container
    claimed_and_lost(pipeline)
    # Not due yet: the tick reads its log and nothing of the order.
    assert c.supervisor.tick() == TickReport(entities_read=1)
    pipeline.clock.advance(seconds=31)
    report = c.supervisor.tick()
    assert report.retried == 1
    st = state(pipeline)
    assert (st["ProcessState"], st.get("LockedBy"), st["FailureCount"]) == ("Pending", None, 1)
    assert st["CompleteBy"] is not None
    assert "timed out" in st["Steps"]["hold"]["last_error"]
    # The retry command waits out the backoff (1 s here) before a Scheduler can see it.
    assert visible_count(pipeline, "SchedulerQueueName") == 0
    (cmd,) = drain_json_eventually(pipeline, "SchedulerQueueName", timeout=5)
    assert cmd["kind"] == "start"


def test_backoff_grows_with_the_failure_count(pipeline: Pipeline) -> None:
    c = pipeline.container
    claimed_and_lost(pipeline)
    complete_bys = []
    for _ in range(2):
        pipeline.clock.advance(seconds=31)
        now = pipeline.clock.now
        c.supervisor.tick()
        complete_bys.append(state(pipeline)["CompleteBy"] - now)
        (cmd,) = drain_json_eventually(pipeline, "SchedulerQueueName", timeout=8)
        c.scheduler.handle_command(json.dumps(cmd))
        drain_json(pipeline.env["AlphaRequestsQueueName"])
    grace = timedelta(seconds=10)
    assert [d - grace for d in complete_bys] == [timedelta(seconds=1), timedelta(seconds=2)]


def test_at_the_threshold_the_order_fails_with_an_alert_and_compensation(
        pipeline: Pipeline) -> None:
    env, c = pipeline.env, pipeline.container
    claimed_and_lost(pipeline)
    for _ in range(2):  # FailureThreshold=3: two retries...
        pipeline.clock.advance(seconds=31)
        assert c.supervisor.tick().retried == 1
        (cmd,) = drain_json_eventually(pipeline, "SchedulerQueueName", timeout=8)
        c.scheduler.handle_command(json.dumps(cmd))
        drain_json(env["AlphaRequestsQueueName"])
    pipeline.clock.advance(seconds=31)
    assert c.supervisor.tick().failed == 1  # ...then the third failure is final
    st = state(pipeline)
    assert (st["ProcessState"], st["FailureCount"], st["Compensation"]) == ("Error", 3, "Pending")
    (alert,) = entities(env["OperatorAlertsTableName"])
    assert alert["Kind"] == "OrderFailed" and "gave up after 3 failures" in alert["Reason"]
    (cmd,) = drain_json(env["SchedulerQueueName"])
    assert cmd["kind"] == "compensate"
    # The Scheduler undoes the step that may have happened (in doubt), exactly once. Its
    # answer was never heard, so it is learned first: asked again under its own key.
    c.scheduler.handle_command(json.dumps(cmd))
    (again,) = drain_json(env["AlphaRequestsQueueName"])
    assert (again["action"], again["operation"], again["idempotency_key"]) == (
        "do", "hold", "o-1.hold.do")
    assert state(pipeline)["Steps"]["hold"]["status"] == "learning"
    c.scheduler.handle_reply(reply(again, result={"id": "hold-7"}))
    st = state(pipeline)
    assert st["Steps"]["hold"]["result"] == {"id": "hold-7"}
    (undo,) = drain_json(env["AlphaRequestsQueueName"])
    assert (undo["action"], undo["operation"], undo["compensates"]) == (
        "undo", "release", "o-1.hold.do")
    c.scheduler.handle_reply(reply(undo))
    st = state(pipeline)
    assert st["Compensation"] == "Done"
    assert st["Steps"]["hold"]["status"] == "compensated"
    c.scheduler.handle_command(json.dumps(cmd))  # a duplicate compensate changes nothing
    assert drain_json(env["AlphaRequestsQueueName"]) == []


def test_two_supervisors_at_once_recover_each_step_once(pipeline: Pipeline) -> None:
    claimed_and_lost(pipeline)
    pipeline.clock.advance(seconds=31)
    supervisors = [pipeline.sibling("a").supervisor, pipeline.sibling("b").supervisor]
    race_on_save([s._store for s in supervisors])
    reports: list[TickReport] = []
    threads = [threading.Thread(target=lambda s=s: reports.append(s.tick()))
               for s in supervisors]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert sorted((r.retried, r.lost_races) for r in reports) == [(0, 1), (1, 0)]
    assert state(pipeline)["FailureCount"] == 1
    assert len(drain_json_eventually(pipeline, "SchedulerQueueName", timeout=5)) == 1


def test_pending_order_nobody_took_is_rescued(pipeline: Pipeline) -> None:
    c = pipeline.container
    accept(pipeline)  # the start command is consumed and lost
    pipeline.clock.advance(seconds=5)
    assert c.supervisor.tick().rescued == 0  # within the grace period
    pipeline.clock.advance(seconds=6)
    assert c.supervisor.tick().rescued == 1
    assert state(pipeline)["FailureCount"] == 0
    (cmd,) = drain_json(pipeline.env["SchedulerQueueName"])
    assert cmd["kind"] == "start"
    assert c.scheduler.handle_command(json.dumps(cmd)).outcome.value == "applied"


def test_index_entry_without_an_order_is_dropped_after_the_grace(pipeline: Pipeline) -> None:
    c = pipeline.container
    def died(*_: object, **__: object) -> None:
        raise ConnectionError("intake died before writing the order")

    c.store._states.submit_transaction = died  # type: ignore[attr-defined]  # after its entry
    o = parse_order(json.dumps(order("ghost")))
    with pytest.raises(ConnectionError):
        c.store.create(o, receive(o.order_id, c.workflow, pipeline.clock.now))
    assert len(index_entries(pipeline.env)) == 1
    assert c.supervisor.tick().forgotten == 0
    pipeline.clock.advance(seconds=11)
    assert c.supervisor.tick().forgotten == 1
    assert index_entries(pipeline.env) == []


def _completed_orders(p: Pipeline, n: int) -> None:
    store = p.container.store
    for i in range(n):
        o = parse_order(json.dumps(order(f"done-{i:05d}")))
        s = receive(o.order_id, p.container.workflow, p.clock.now)
        store.create(o, s)
        s = store.get_state(o.order_id)
        assert s is not None
        s.process_state = ProcessState.PROCESSED
        saved = store.save(s)
        assert saved.index_key
        store.drop(saved.index_key)


def test_tick_cost_grows_neither_with_completed_orders_nor_with_orders_not_due(
        pipeline: Pipeline) -> None:
    c, meter = pipeline.container, pipeline.meter
    for i in range(3):
        claimed_and_lost(pipeline, f"live-{i}")
    meter.reset()
    c.supervisor.tick()
    before = meter.snapshot()
    _completed_orders(pipeline, 300)
    meter.reset()
    c.supervisor.tick()
    after = meter.snapshot()
    assert after == before
    # Reads: the tick log, the pauses (none), and one key-range query per index partition (16,
    # and the one from before the due-time index), which find nothing due; the one write is
    # the tick log's.
    assert before["entities_read"] == 1
    assert before["requests"] == {"table.query": 18, "table.read": 1, "table.write": 1}
    # Once their time comes, the three orders in flight are read, and only they.
    pipeline.clock.advance(seconds=31)
    meter.reset()
    assert c.supervisor.tick().retried == 3
    assert meter.snapshot()["entities_read"] == 1 + 2 * 3


def test_an_unreadable_record_is_reported_once_and_the_tick_goes_on(pipeline: Pipeline) -> None:
    """Bug 2: one bad record stopped every tick, and every order after it was never recovered."""
    env, c = pipeline.env, pipeline.container
    claimed_and_lost(pipeline, "a-bad")
    claimed_and_lost(pipeline, "b-good")
    table = c.tables.get_table_client(env["StateTableName"])
    bad = table.get_entity("a-bad", "state")
    good_steps = bad["Steps"]
    bad["ProcessState"] = "Exploded"
    table.update_entity(bad)
    pipeline.clock.advance(seconds=31)
    report = c.supervisor.tick()
    assert (report.unreadable, report.retried, report.errors) == (1, 1, 0)
    assert state(pipeline, "b-good")["FailureCount"] == 1  # recovered all the same
    (alert,) = entities(env["OperatorAlertsTableName"])
    assert (alert["Kind"], alert["OrderID"]) == ("RecordUnreadable", "a-bad")
    assert "Exploded" in alert["Reason"]
    assert "ValueError" not in alert["Reason"]  # an operator reads it: in words
    # Reported once and filed aside: the next tick does not read it at all ...
    assert c.supervisor.tick().due == 0
    # ... and when it comes round again unchanged, it is filed aside again, quietly.
    recheck = c.supervisor._policy.unreadable_recheck.total_seconds()
    pipeline.clock.advance(seconds=recheck + 1)
    assert c.supervisor.tick().skipped == 1
    assert len(entities(env["OperatorAlertsTableName"])) == 1
    bad = table.get_entity("a-bad", "state")
    bad["Steps"] = "{not json"
    table.update_entity(bad)
    pipeline.clock.advance(seconds=recheck + 1)
    assert c.supervisor.tick().unreadable == 1  # a new version: reported again
    assert len(entities(env["OperatorAlertsTableName"])) == 2
    # Repaired: the entry filed aside stands for the record, which is recovered and filed anew.
    bad = table.get_entity("a-bad", "state")
    bad["Steps"] = good_steps
    bad["ProcessState"] = "Processing"
    table.update_entity(bad)
    pipeline.clock.advance(seconds=recheck + 1)
    report = c.supervisor.tick()
    assert (report.unreadable, report.skipped, report.retried) == (0, 0, 1)
    assert state(pipeline, "a-bad")["FailureCount"] == 1
    (entry,) = [e for e in entities(env["InFlightTableName"]) if e.get("OrderID") == "a-bad"]
    assert "Unreadable" not in entry


def test_a_fault_on_one_order_leaves_the_rest_of_the_tick_to_run(pipeline: Pipeline) -> None:
    c = pipeline.container
    claimed_and_lost(pipeline, "a-first")
    claimed_and_lost(pipeline, "b-second")
    pipeline.clock.advance(seconds=31)
    real_save = c.store.save

    def flaky(s: Any, **kw: Any) -> Any:
        if s.order_id == "a-first":
            raise ServiceRequestError("the store dropped the connection")
        return real_save(s, **kw)

    c.store.save = flaky  # type: ignore[method-assign]
    report = c.supervisor.tick()
    assert (report.errors, report.retried) == (1, 1)
    c.store.save = real_save  # type: ignore[method-assign]
    assert c.supervisor.tick().retried == 1  # the next tick tries it again
    assert state(pipeline, "a-first")["FailureCount"] == 1


def test_an_order_no_scheduler_can_take_is_failed_with_an_alert(pipeline: Pipeline) -> None:
    """Bug 4: with its order row gone, a Pending order was rescued forever, silently."""
    env, c = pipeline.env, pipeline.container
    accept(pipeline)
    c.tables.get_table_client(env["StateTableName"]).delete_entity("o-1", "order")
    rescues = 0
    for _ in range(10):
        pipeline.clock.advance(seconds=11)
        report = c.supervisor.tick()
        for cmd in drain_json(env["SchedulerQueueName"]):
            assert c.scheduler.handle_command(json.dumps(cmd)).outcome.value == "unknown_order"
        rescues += report.rescued
        if report.failed:
            break
    assert rescues == 3  # RescueThreshold (the default 5 is lowered for this pipeline)
    st = state(pipeline)
    assert st["ProcessState"] == "Error" and "no Scheduler took the order" in st["LastError"]
    (alert,) = entities(env["OperatorAlertsTableName"])
    assert (alert["Kind"], alert["OrderID"]) == ("OrderFailed", "o-1")


# The in-flight entries of the releases before the due-time index, by the commit that wrote them.
LEGACY_ENTRIES = {
    "d227dda": lambda oid, now: {"RowKey": oid, "Since": now},
    "75e3701": lambda oid, now: {"RowKey": f"{oid}@0", "OrderID": oid, "Generation": 0,
                                 "Since": now},
}


def _as_before_the_due_index(p: Pipeline, order_id: str, shape: str = "75e3701") -> None:
    """Turn an order's record and index entry into what the app wrote before the due-time
    index: no IndexKey on the record, one entry in the old ``inflight`` partition."""
    c = p.container
    states = c.tables.get_table_client(p.env["StateTableName"])
    e = states.get_entity(order_id, "state")
    c.store.drop(e.pop("IndexKey"))
    states.update_entity(e, mode=UpdateMode.REPLACE)
    c.tables.get_table_client(p.env["InFlightTableName"]).create_entity(
        {"PartitionKey": "inflight", **LEGACY_ENTRIES[shape](order_id, p.clock.now)})


@pytest.mark.parametrize("shape", sorted(LEGACY_ENTRIES))
def test_entries_from_before_the_due_index_are_filed_by_their_due_time(
        pipeline: Pipeline, shape: str) -> None:
    c, env = pipeline.container, pipeline.env
    claimed_and_lost(pipeline, "old-overdue")
    pipeline.clock.advance(seconds=20)
    claimed_and_lost(pipeline, "old-waiting")
    for oid in ("old-overdue", "old-waiting"):
        _as_before_the_due_index(pipeline, oid, shape)
    assert index_entries(env) == []
    pipeline.clock.advance(seconds=11)  # the first one's step is overdue, the second's is not
    report = c.supervisor.tick()
    assert (report.retried, report.moved) == (1, 1)
    assert entities(env["InFlightTableName"], "PartitionKey eq 'inflight'") == []
    filed = {e["OrderID"]: e for e in index_entries(env)}
    assert set(filed) == {"old-overdue", "old-waiting"}
    for oid in filed:
        assert state(pipeline, oid).get("IndexKey", "").endswith(f"|{oid}@0")
    assert c.supervisor.tick().due == 0  # nothing left to read before its time


def test_a_tick_costs_the_same_however_many_records_are_unreadable(
        make_pipeline: Any) -> None:
    """Unreadable records are reported and filed aside at most the tick's recovery budget at a
    time, so a tick's storage requests are bounded by the budget, not by how many there are,
    and a readable order behind them all is recovered within N / budget ticks.
    UNREADABLE_RECORDS=1000 measures the issue's case (the default keeps CI quick)."""
    import os

    from shared.domain import due_index

    bad, budget = int(os.environ.get("UNREADABLE_RECORDS", "240")), 40
    p = make_pipeline(SupervisorMaxRecoveriesPerTick=str(budget), FailureThreshold="3",
                      RetryBackoffSeconds="1", RetryBackoffMaxSeconds="4")
    c, env = p.container, p.env
    states = c.tables.get_table_client(env["StateTableName"])
    index = c.tables.get_table_client(env["InFlightTableName"])
    at = p.clock.now - timedelta(minutes=5)  # due before the readable order: at the front
    by_shard: dict[str, list[Any]] = {}
    for i in range(bad):
        oid = f"bad-{i:04d}"
        states.create_entity({"PartitionKey": oid, "RowKey": "state", "OrderID": oid,
                              "ProcessState": "Exploded"})
        key = due_index.key_for(oid, 1, at)
        by_shard.setdefault(key.partition, []).append(("create", {
            "PartitionKey": key.partition, "RowKey": key.row, "OrderID": oid, "Generation": 1,
            "Since": at, "Base": "W/\"x\""}))
    for ops in by_shard.values():
        for start in range(0, len(ops), 100):
            index.submit_transaction(ops[start:start + 100])
    claimed_and_lost(p, "good")
    p.clock.advance(seconds=31)
    costs: list[int] = []
    recovered_at = None
    for tick in range(1, bad // budget + 3):
        p.meter.reset()
        report = c.supervisor.tick()
        costs.append(sum(p.meter.snapshot()["requests"].values()))
        if report.retried:
            recovered_at = tick
    assert state(p, "good")["FailureCount"] == 1
    assert recovered_at is not None and recovered_at <= bad // budget + 1
    # Each unreadable record: its read, its alert (a look for its key raised before, today and
    # the day before, and the row), and its entry moved (a write and a delete);
    # beside them the tick log (a read and a write), the pauses (a query), one query per index
    # partition, and the readable order's recovery when it comes (its read, its write, its
    # request sent), and the alerts' look for rows past their retention (once a day per
    # instance: docs/settings.md).
    assert max(costs) <= 2 + 1 + 17 + 6 * budget + 6 + 1
    # Every one reported, once, and filed aside: the last tick found nothing left to do.
    assert len(entities(env["OperatorAlertsTableName"])) == bad
    assert report.due == 0 and costs[-1] == 2 + 1 + 17
    print(f"\n{bad} unreadable records, budget {budget}: recovered at tick {recovered_at}; "
          f"requests per tick {costs}")
