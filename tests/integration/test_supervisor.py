"""The Supervisor against Azurite: reset, backoff, threshold, alert, rescue, races and cost."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

from azure.storage.queue import QueueServiceClient

from shared.domain.order import parse_order
from shared.domain.state import ProcessState, new_order_state
from shared.handlers.supervisor import TickReport
from tests.integration.conftest import Pipeline
from tests.integration.helpers import drain_json, entities, order, race_on_save
from tests.integration.test_scheduler import accept, drain_json_eventually, reply, state


def visible_count(p: Pipeline, queue_setting: str) -> int:
    q = QueueServiceClient.from_connection_string(p.env["AzureWebJobsStorage"]) \
        .get_queue_client(p.env[queue_setting])
    return len(list(q.peek_messages(max_messages=32)))


def claimed_and_lost(p: Pipeline, order_id: str = "o-1") -> None:
    """An order whose step request vanished: claimed, dispatched, never answered."""
    p.container.scheduler.handle_command(accept(p, order_id))
    drain_json(p.env["InventoryRequestsQueueName"])


def test_overdue_step_is_reset_and_retried_after_a_backoff(pipeline: Pipeline) -> None:
    c = pipeline.container
    claimed_and_lost(pipeline)
    assert c.supervisor.tick() == TickReport(entities_read=2, in_flight=1)  # not overdue yet
    pipeline.clock.advance(seconds=31)
    report = c.supervisor.tick()
    assert report.retried == 1
    st = state(pipeline)
    assert (st["ProcessState"], st.get("LockedBy"), st["FailureCount"]) == ("Pending", None, 1)
    assert st["CompleteBy"] is not None
    assert "timed out" in st["Steps"]["reserve_inventory"]["last_error"]
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
        drain_json(pipeline.env["InventoryRequestsQueueName"])
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
        drain_json(env["InventoryRequestsQueueName"])
    pipeline.clock.advance(seconds=31)
    assert c.supervisor.tick().failed == 1  # ...then the third failure is final
    st = state(pipeline)
    assert (st["ProcessState"], st["FailureCount"], st["Compensation"]) == ("Error", 3, "Pending")
    (alert,) = entities(env["OperatorAlertsTableName"])
    assert alert["Kind"] == "OrderFailed" and "gave up after 3 failures" in alert["Reason"]
    (cmd,) = drain_json(env["SchedulerQueueName"])
    assert cmd["kind"] == "compensate"
    # The Scheduler undoes the step that may have happened (in doubt), exactly once.
    c.scheduler.handle_command(json.dumps(cmd))
    (undo,) = drain_json(env["InventoryRequestsQueueName"])
    assert (undo["action"], undo["operation"]) == ("undo", "release")
    c.scheduler.handle_reply(reply(undo))
    st = state(pipeline)
    assert st["Compensation"] == "Done"
    assert st["Steps"]["reserve_inventory"]["status"] == "compensated"
    c.scheduler.handle_command(json.dumps(cmd))  # a duplicate compensate changes nothing
    assert drain_json(env["InventoryRequestsQueueName"]) == []


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
    inflight = c.tables.get_table_client(pipeline.env["InFlightTableName"])
    inflight.create_entity({"PartitionKey": "inflight", "RowKey": "ghost",
                            "Since": pipeline.clock.now})
    assert c.supervisor.tick().forgotten == 0
    pipeline.clock.advance(seconds=11)
    assert c.supervisor.tick().forgotten == 1
    assert entities(pipeline.env["InFlightTableName"]) == []


def _completed_orders(p: Pipeline, n: int) -> None:
    store = p.container.store
    for i in range(n):
        o = parse_order(json.dumps(order(f"done-{i:05d}")))
        s = new_order_state(o.order_id, p.container.workflow, p.clock.now)
        store.create(o, s)
        s = store.get_state(o.order_id)
        assert s is not None
        s.process_state = ProcessState.PROCESSED
        store.save(s)
        store.forget(o.order_id)


def test_tick_cost_does_not_grow_with_completed_orders(pipeline: Pipeline) -> None:
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
    # Reads: one index query plus one state record per order in flight, nothing else.
    assert before["entities_read"] == 2 * 3
    assert before["requests"] == {"table.query": 1, "table.read": 3}
