"""The Scheduler against Azurite: the exclusive claim, dispatch, replies, crashes."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from shared.domain.messages import AgentReply
from shared.handlers.scheduler import Outcome
from tests.integration.conftest import Pipeline
from tests.integration.helpers import (
    drain_json,
    entities,
    function,
    index_entries,
    pending,
    race_on_save,
)

intake = function("intake")


def accept(p: Pipeline, order_id: str = "o-1", **changes: Any) -> str:
    """A Pending order and its start command, for the Scheduler's side of the hand-over."""
    return pending(order_id, **changes)


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """What a service answers a request's work with: its own id for it, which its undo names."""
    return {"id": f"id-{request['idempotency_key']}"}


def reply(request: dict[str, Any], outcome: str = "ok", error: str | None = None,
          result: dict[str, Any] | None = None) -> str:
    """The Agent's reply to ``request``. An ok one to a do carries the service's answer
    (``answer``), as a service that did the work gives one; a refusal carries none."""
    if result is None and outcome == "ok" and request["action"] == "do":
        result = answer(request)
    return AgentReply(order_id=request["order_id"], step=request["step"],
                      action=request["action"], attempt=request["attempt"],
                      outcome=outcome, error=error,  # type: ignore[arg-type]
                      result=result, outbox_seq=request.get("outbox_seq"),
                      token=request.get("token")).to_json()


def state(p: Pipeline, order_id: str = "o-1") -> dict[str, Any]:
    (s,) = entities(p.env["StateTableName"], "PartitionKey eq @p and RowKey eq 'state'",
                    p=order_id)
    s["Steps"] = {st["name"]: st for st in json.loads(s["Steps"])}
    return s


def test_two_schedulers_racing_for_one_order_exactly_one_wins(pipeline: Pipeline) -> None:
    cmd = accept(pipeline)
    schedulers = [pipeline.sibling("scheduler-a").scheduler,
                  pipeline.sibling("scheduler-b").scheduler]
    race_on_save([s._store for s in schedulers])
    results: dict[str, Outcome] = {}

    def run(s: Any) -> None:
        results[s.instance_id] = s.handle_command(cmd).outcome

    threads = [threading.Thread(target=run, args=(s,)) for s in schedulers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert sorted(results.values()) == [Outcome.APPLIED, Outcome.IGNORED]
    (winner,) = [k for k, v in results.items() if v is Outcome.APPLIED]
    st = state(pipeline)
    assert st["LockedBy"] == winner and st["ProcessState"] == "Processing"
    assert len(drain_json(pipeline.env["AlphaRequestsQueueName"])) == 1


def test_happy_path_dispatches_each_step_and_processes_the_order(pipeline: Pipeline) -> None:
    env, s = pipeline.env, pipeline.container.scheduler
    reply_q = env["ReplyQueueAllowList"].rstrip("*") + "-r"
    pipeline.container.queues.create_queue(reply_q)
    assert s.handle_command(accept(pipeline, reply_to=reply_q)).outcome is Outcome.APPLIED
    st = state(pipeline)
    assert st["LockedBy"] == "scheduler-test" and st["CompleteBy"] is not None
    keys = []
    for step, queue in [("hold", "AlphaRequestsQueueName"),
                        ("take", "BetaRequestsQueueName"),
                        ("send", "GammaRequestsQueueName")]:
        (req,) = drain_json(env[queue])
        assert (req["step"], req["action"], req["attempt"]) == (step, "do", 1)
        assert req["order"]["order_id"] == "o-1"
        keys.append(req["idempotency_key"])
        assert s.handle_reply(reply(req)).outcome is Outcome.APPLIED
    assert keys == ["o-1.hold.do", "o-1.take.do",
                    "o-1.send.do"]
    st = state(pipeline)
    assert st["ProcessState"] == "Processed"
    assert st.get("LockedBy") is None and st.get("CompleteBy") is None
    assert st["FailureCount"] == 0
    assert all(x["status"] == "completed" for x in st["Steps"].values())
    assert index_entries(env) == []  # settled: out of the Supervisor's way
    events = [m["event"] for m in drain_json(reply_q)]
    assert events == ["received", "step_completed", "step_completed", "step_completed",
                      "completed"]


def test_duplicate_and_late_replies_change_nothing(pipeline: Pipeline) -> None:
    env, s = pipeline.env, pipeline.container.scheduler
    s.handle_command(accept(pipeline))
    (req,) = drain_json(env["AlphaRequestsQueueName"])
    assert s.handle_reply(reply(req)).outcome is Outcome.APPLIED
    before = state(pipeline)
    assert s.handle_reply(reply(req)).outcome is Outcome.IGNORED
    assert s.handle_reply(reply(req, "permanent_error", "late refusal")).outcome \
        is Outcome.IGNORED
    assert state(pipeline) == before
    assert len(drain_json(env["BetaRequestsQueueName"])) == 1


def test_duplicate_start_command_is_ignored(pipeline: Pipeline) -> None:
    s = pipeline.container.scheduler
    cmd = accept(pipeline)
    assert s.handle_command(cmd).outcome is Outcome.APPLIED
    assert s.handle_command(cmd).outcome is Outcome.IGNORED
    assert len(drain_json(pipeline.env["AlphaRequestsQueueName"])) == 1


def test_reply_from_an_attempt_the_supervisor_replaced_is_ignored(pipeline: Pipeline) -> None:
    env, c = pipeline.env, pipeline.container
    c.scheduler.handle_command(accept(pipeline))
    (first,) = drain_json(env["AlphaRequestsQueueName"])
    pipeline.clock.advance(minutes=5)
    assert c.supervisor.tick().retried == 1
    (cmd,) = drain_json_eventually(pipeline, "SchedulerQueueName")
    c.scheduler.handle_command(json.dumps(cmd))
    (second,) = drain_json(env["AlphaRequestsQueueName"])
    assert second["attempt"] == 2
    assert second["idempotency_key"] == first["idempotency_key"]  # stable across attempts
    assert c.scheduler.handle_reply(reply(first)).outcome is Outcome.IGNORED
    assert c.scheduler.handle_reply(reply(second)).outcome is Outcome.APPLIED


class Died(Exception):
    pass


def dying_sibling(p: Pipeline, fails: str = "send") -> Any:
    """Another instance whose queue sends (or alert writes) fail, as if it died right there."""
    c = p.sibling("doomed")

    def die(*a: object, **k: object) -> None:
        raise Died

    target = c.scheduler._relay._alerts if fails == "alert" else c.scheduler._relay._sender
    setattr(target, "raise_alert" if fails == "alert" else "send", die)
    return c


def test_a_redelivered_command_finishes_the_dispatch_its_first_delivery_did_not_send(
        pipeline: Pipeline) -> None:
    env, c = pipeline.env, pipeline.container
    cmd = accept(pipeline)
    with pytest.raises(Died):
        dying_sibling(pipeline).scheduler.handle_command(cmd)
    st = state(pipeline)
    assert st["ProcessState"] == "Processing" and st["LockedBy"] == "doomed"
    assert drain_json(env["AlphaRequestsQueueName"]) == []
    # The host redelivers the command: the claim stands, its dispatch goes now.
    assert c.scheduler.handle_command(cmd, redelivered=True).outcome is Outcome.REPLAYED
    (req,) = drain_json(env["AlphaRequestsQueueName"])
    assert (req["attempt"], req["idempotency_key"]) == (1, "o-1.hold.do")
    st = state(pipeline)
    assert st["FailureCount"] == 0 and json.loads(st["Outbox"]) == []  # confirmed sent
    # A first delivery that merely lost the race leaves the winner to send its own.
    assert c.scheduler.handle_command(cmd).outcome is Outcome.IGNORED


def test_a_dispatch_never_sent_is_sent_again_by_the_supervisor_without_a_failure(
        pipeline: Pipeline) -> None:
    env, c = pipeline.env, pipeline.container
    cmd = accept(pipeline)
    with pytest.raises(Died):
        dying_sibling(pipeline).scheduler.handle_command(cmd)
    # No redelivery (say the command went to the poison queue): at complete-by the record
    # shows the request was never confirmed sent, so it goes again, and no failure counts.
    pipeline.clock.advance(seconds=31)
    assert c.supervisor.tick().redispatched == 1
    (req,) = drain_json(env["AlphaRequestsQueueName"])
    st = state(pipeline)
    assert (req["attempt"], st["FailureCount"], st["Rescues"]) == (1, 0, 1)
    assert req["complete_by"] > pipeline.clock.now.isoformat()  # a fresh budget
    # The Agent answers that attempt: the order goes on as if nothing happened.
    assert c.scheduler.handle_reply(reply(req)).outcome is Outcome.APPLIED
    assert state(pipeline)["Rescues"] == 0


def test_an_alert_the_store_failed_to_write_is_raised_by_the_retry(pipeline: Pipeline) -> None:
    """Bug 5: the transition was saved, the alert write failed, the retry was ignored."""
    env, c = pipeline.env, pipeline.container
    c.scheduler.handle_command(accept(pipeline))
    (req,) = drain_json(env["AlphaRequestsQueueName"])
    c.scheduler.handle_reply(reply(req))
    (took,) = drain_json(env["BetaRequestsQueueName"])
    refusal = reply(took, "permanent_error", "HTTP 422 refused")
    with pytest.raises(Died):
        dying_sibling(pipeline, fails="alert").scheduler.handle_reply(refusal)
    assert state(pipeline)["ProcessState"] == "Error"
    assert entities(env["OperatorAlertsTableName"]) == []
    assert drain_json(env["BetaRequestsQueueName"]) == []
    assert c.scheduler.handle_reply(refusal, redelivered=True).outcome is Outcome.REPLAYED
    (alert,) = entities(env["OperatorAlertsTableName"])
    assert (alert["Kind"], alert["OrderID"]) == ("OrderFailed", "o-1")
    # The refused take did nothing and is not undone: the undo goes to hold, the step before.
    assert drain_json(env["BetaRequestsQueueName"]) == []
    (undo,) = drain_json(env["AlphaRequestsQueueName"])
    assert (undo["action"], undo["compensates"]) == ("undo", "o-1.hold.do")
    # Once more (another retry): still one alert, and the undo is the same request again.
    c.scheduler.handle_reply(refusal, redelivered=True)
    assert len(entities(env["OperatorAlertsTableName"])) == 1
    assert drain_json(env["BetaRequestsQueueName"]) == []  # still no undo of take


def test_permanent_error_fails_alerts_and_starts_compensation(pipeline: Pipeline) -> None:
    env, s = pipeline.env, pipeline.container.scheduler
    s.handle_command(accept(pipeline))
    (req,) = drain_json(env["AlphaRequestsQueueName"])
    s.handle_reply(reply(req))
    (took,) = drain_json(env["BetaRequestsQueueName"])
    s.handle_reply(reply(took, "permanent_error", "HTTP 422 refused"))
    st = state(pipeline)
    assert st["ProcessState"] == "Error" and "refused" in st["LastError"]
    (alert,) = entities(env["OperatorAlertsTableName"])
    assert (alert["Kind"], alert["OrderID"], alert["Step"]) == (
        "OrderFailed", "o-1", "take")
    # The refused take did nothing: it is not undone (nothing goes to its service), and no
    # result is kept for it. The completed hold is undone, by the answer its work was given.
    assert drain_json(env["BetaRequestsQueueName"]) == []
    st = state(pipeline)
    assert st["Steps"]["take"]["status"] == "failed"
    assert "result" not in st["Steps"]["take"] and "undo_key" not in st["Steps"]["take"]
    assert st["Steps"]["hold"]["result"] == answer(req)
    assert st["Steps"]["hold"]["status"] == "compensating"
    assert st["Steps"]["hold"]["undo_key"] == "o-1.hold.undo"  # recorded when first sent
    (undo,) = drain_json(env["AlphaRequestsQueueName"])
    assert (undo["action"], undo["operation"], undo["idempotency_key"], undo["compensates"]) == (
        "undo", "release", "o-1.hold.undo", "o-1.hold.do")
    s.handle_reply(reply(undo))
    st = state(pipeline)
    assert st["Compensation"] == "Done"
    assert st["Steps"]["hold"]["status"] == "compensated"
    assert st["Steps"]["take"]["status"] == "failed"
    assert drain_json(env["BetaRequestsQueueName"]) == []
    assert index_entries(env) == []


def test_message_for_an_unknown_order_is_ignored(pipeline: Pipeline) -> None:
    from shared.domain.messages import CommandKind, SchedulerCommand

    cmd = SchedulerCommand(kind=CommandKind.START, order_id="ghost").to_json()
    assert pipeline.container.scheduler.handle_command(cmd).outcome is Outcome.UNKNOWN_ORDER


def drain_json_eventually(p: Pipeline, queue_setting: str, n: int = 1,
                          timeout: float = 10) -> list[dict[str, Any]]:
    """Commands may be sent with a visibility delay (backoff): wait until they show."""
    from tests.conftest import wait_until

    got: list[dict[str, Any]] = []

    def enough() -> bool:
        got.extend(drain_json(p.env[queue_setting]))
        return len(got) >= n

    wait_until(enough, timeout=timeout, message=f"{n} message(s) on {queue_setting}")
    return got




def test_dying_before_dispatching_the_undo_still_raises_the_alert(pipeline: Pipeline) -> None:
    env, c = pipeline.env, pipeline.container
    c.scheduler.handle_command(accept(pipeline))
    (req,) = drain_json(env["AlphaRequestsQueueName"])
    c.scheduler.handle_reply(reply(req))
    (took,) = drain_json(env["BetaRequestsQueueName"])
    with pytest.raises(Died):
        dying_sibling(pipeline).scheduler.handle_reply(
            reply(took, "permanent_error", "HTTP 422 refused"))
    (alert,) = entities(env["OperatorAlertsTableName"])
    assert (alert["Kind"], alert["OrderID"]) == ("OrderFailed", "o-1")
    # The undo (of hold: the refused take did nothing) was never sent; the Supervisor finds
    # it overdue and sends it, free.
    assert drain_json(env["AlphaRequestsQueueName"]) == []
    pipeline.clock.advance(seconds=31)
    assert c.supervisor.tick().redispatched == 1
    (undo,) = drain_json(env["AlphaRequestsQueueName"])
    assert undo["action"] == "undo" and undo["compensates"] == "o-1.hold.do"
    assert drain_json(env["BetaRequestsQueueName"]) == []
    assert state(pipeline)["CompensationFailureCount"] == 0
