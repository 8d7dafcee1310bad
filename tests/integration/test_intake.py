"""Intake against Azurite, through the registered function with real ServiceBusMessages."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from azure.core.exceptions import ServiceRequestError

from shared import bootstrap
from shared.adapters.rejections import Rejection, RejectionKind
from tests.integration.helpers import (
    drain_json,
    entities,
    function,
    index_entries,
    order,
    sb_message,
)

intake = function("intake")


@pytest.fixture
def env(app_env: Callable[..., dict[str, str]]) -> dict[str, str]:
    return app_env()


def test_accepted_order_is_stored_atomically_and_started_at_once(env: dict[str, str]) -> None:
    intake(msg=sb_message(order("o-1")))
    rows = {e["RowKey"]: e for e in entities(env["StateTableName"], "PartitionKey eq @p", p="o-1")}
    assert set(rows) == {"order", "state"}
    state = rows["state"]
    assert state["OrderID"] == "o-1"
    assert json.loads(rows["order"]["Document"])["customer_id"] == "c-1"
    # Intake's start command went to the Scheduler in the same invocation: the order is
    # claimed, its first step requested, and no command message was spent on the hand-over.
    assert state["ProcessState"] == "Processing" and state["FailureCount"] == 0
    assert state["LockedBy"] == bootstrap.container().scheduler.instance_id
    assert state.get("CompleteBy") is not None
    assert drain_json(env["SchedulerQueueName"]) == []
    (req,) = drain_json(env["InventoryRequestsQueueName"])
    assert (req["order_id"], req["step"], req["attempt"]) == ("o-1", "reserve_inventory", 1)
    assert json.loads(state["Outbox"]) == []  # the request is confirmed sent
    assert [e["OrderID"] for e in index_entries(env)] == ["o-1"]


def test_redelivery_of_the_same_order_changes_nothing(env: dict[str, str]) -> None:
    intake(msg=sb_message(order("o-1")))
    before = entities(env["StateTableName"])
    drain_json(env["InventoryRequestsQueueName"])
    intake(msg=sb_message(order("o-1"), delivery_count=2))
    assert entities(env["StateTableName"]) == before
    assert drain_json(env["SchedulerQueueName"]) == []
    assert drain_json(env["InventoryRequestsQueueName"]) == []
    assert entities(env["RejectedOrdersTableName"]) == []


def _fails_once(monkeypatch: pytest.MonkeyPatch, target: object, name: str) -> None:
    real = getattr(target, name)
    calls = 0

    def once(*a: object, **k: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ServiceRequestError(f"{name}: connection reset")
        return real(*a, **k)

    monkeypatch.setattr(target, name, once)


@pytest.mark.parametrize("dies_at", [
    "save",  # after the order is stored, at the Scheduler's claim
    "send",  # after the claim, sending its request
    "confirm_outbox",  # after the request went, confirming it
])
def test_intake_that_dies_handing_the_order_on_is_finished_by_the_redelivery(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, dies_at: str) -> None:
    c = bootstrap.container()
    # The store and sender intake's relay and the Scheduler use are the container's.
    target = c.store if dies_at != "send" else c.intake._relay._sender
    _fails_once(monkeypatch, target, dies_at)
    with pytest.raises(ServiceRequestError):  # the message is not completed: redelivered
        intake(msg=sb_message(order("o-1")))
    intake(msg=sb_message(order("o-1"), delivery_count=2))
    (state,) = entities(env["StateTableName"], "RowKey eq 'state'")
    assert state["ProcessState"] == "Processing" and json.loads(state["Outbox"]) == []
    requests = drain_json(env["InventoryRequestsQueueName"])
    # Sent once, or (died after sending) twice under one idempotency key: never two pieces of
    # work.
    assert len(requests) == (2 if dies_at == "confirm_outbox" else 1)
    assert {r["idempotency_key"] for r in requests} == {json.loads(state["Steps"])[0]["work_key"]}
    assert drain_json(env["SchedulerQueueName"]) == []


def test_an_order_the_scheduler_already_took_is_not_taken_again(env: dict[str, str]) -> None:
    intake(msg=sb_message(order("o-1")))
    (before,) = entities(env["StateTableName"], "RowKey eq 'state'")
    # The Supervisor's start for the same order (intake seemed stalled) arrives afterwards.
    cmd = {"kind": "start", "order_id": "o-1", "reason": "rescue", "outbox_seq": 0}
    assert bootstrap.container().scheduler.handle_command(json.dumps(cmd)).outcome == "ignored"
    (after,) = entities(env["StateTableName"], "RowKey eq 'state'")
    assert after == before
    assert len(drain_json(env["InventoryRequestsQueueName"])) == 1


def test_same_id_with_different_content_is_a_recorded_conflict(env: dict[str, str]) -> None:
    intake(msg=sb_message(order("o-1")))
    intake(msg=sb_message(order("o-1", customer_id="someone-else"), message_id="m-2"))
    doc = entities(env["StateTableName"], "PartitionKey eq @p and RowKey eq 'order'", p="o-1")
    assert json.loads(doc[0]["Document"])["customer_id"] == "c-1"  # not overwritten
    (rej,) = entities(env["RejectedOrdersTableName"])
    assert rej["Kind"] == "conflict" and "different content" in rej["Reason"]
    assert "someone-else" in rej["Body"]
    (alert,) = entities(env["OperatorAlertsTableName"])
    assert (alert["Kind"], alert["OrderID"]) == ("OrderConflict", "o-1")


@pytest.mark.parametrize(("body", "reason"), [
    (b"{not json", "Invalid JSON"),
    (json.dumps(order("bad/id")).encode(), "order_id"),
    (json.dumps(order("ok", items=[])).encode(), "items"),
    (json.dumps(order("ok", reply_to="elsewhere")).encode(), "ReplyQueueAllowList"),
])
def test_invalid_message_is_recorded_with_its_reason_and_not_retried(
        env: dict[str, str], body: bytes, reason: str) -> None:
    sent = datetime.now(UTC)
    intake(msg=sb_message(body, message_id="bad-1", enqueued=sent))  # the message completes
    (rej,) = entities(env["RejectedOrdersTableName"])
    assert rej["Kind"] == "invalid" and reason in rej["Reason"]
    assert rej["MessageId"] == "bad-1" and rej["Body"] == body.decode()
    assert entities(env["StateTableName"]) == []
    assert drain_json(env["SchedulerQueueName"]) == []
    # A redelivery of the same bad message (same enqueued time) updates its record, it does
    # not add another.
    intake(msg=sb_message(body, message_id="bad-1", delivery_count=2, enqueued=sent))
    (again,) = entities(env["RejectedOrdersTableName"])
    assert again["DeliveryCount"] == 2


def test_the_largest_order_the_schema_takes_is_accepted(env: dict[str, str]) -> None:
    widest = order("o-" + "9" * 126, customer_id="\U0001F600" * 128,
                   items=[{"sku": "\U0001F600" * 63 + '"', "quantity": 10_000,
                           "unit_price": "9999999999.99"}] * 100)
    intake(msg=sb_message(widest))
    (row,) = entities(env["StateTableName"], "RowKey eq 'order'")
    assert json.loads(row["Document"])["items"][99]["sku"].endswith('😀"')
    assert entities(env["RejectedOrdersTableName"]) == []


def test_a_valid_order_storage_refuses_is_recorded_and_alerted_not_retried(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Were a valid order ever past what storage takes (the schema is meant to prevent it),
    every redelivery would fail the same way: it is recorded with its body, once, and the
    message completes; nothing is stored or run."""
    from shared.domain.workflow import Registry

    parse = Registry.parse

    def oversize(self: Registry, body: bytes) -> object:
        return parse(self, body).model_copy(update={"customer_id": "x" * 40_000})

    monkeypatch.setattr(Registry, "parse", oversize)
    body = json.dumps(order("o-1")).encode()
    intake(msg=sb_message(body, message_id="m-big"))
    (rej,) = entities(env["RejectedOrdersTableName"])
    assert rej["Kind"] == "unstorable" and "PropertyValueTooLarge" in rej["Reason"]
    assert (rej["Body"], rej["BodyBytes"]) == (body.decode(), len(body))
    assert rej["BodySha256"] == hashlib.sha256(body).hexdigest()
    (alert,) = entities(env["OperatorAlertsTableName"])
    assert (alert["Kind"], alert["OrderID"]) == ("OrderNotStorable", "o-1")
    assert entities(env["StateTableName"]) == [] and index_entries(env) == []
    assert drain_json(env["SchedulerQueueName"]) == []


def test_rejections_past_their_retention_are_deleted_as_new_ones_arrive(
        app_env: Callable[..., dict[str, str]]) -> None:
    """Senders' input, so bounded: each rejection recorded deletes up to ten rows sent and
    recorded before RejectedRetentionDays; one sent just inside it stays, and so does one sent
    long ago but rejected now."""
    env = app_env(RejectedRetentionDays="30")
    rejections = bootstrap.container().intake._rejections
    now = datetime.now(UTC)
    for i, days in enumerate([31] * 12 + [29]):
        sent = now - timedelta(days=days, minutes=i)
        rejections.record(Rejection(RejectionKind.INVALID, "bad", f"m-{days}-{i}", b"{",
                                    1, sent, sent))  # recorded when it was sent
    assert len(entities(env["RejectedOrdersTableName"])) == 13
    intake(msg=sb_message(b"{late", message_id="late", enqueued=now - timedelta(days=31)))
    ids = [e["MessageId"] for e in entities(env["RejectedOrdersTableName"])]
    assert len([i for i in ids if i.startswith("m-31-")]) == 2 and "late" in ids
    intake(msg=sb_message(b"{new", message_id="new", enqueued=now))
    ids = sorted(e["MessageId"] for e in entities(env["RejectedOrdersTableName"]))
    assert ids == ["late", "m-29-12", "new"]


def test_a_rejected_body_past_the_property_limit_is_kept_in_part_and_named_whole(
        env: dict[str, str]) -> None:
    body = ("\U0001F600" * 40_000).encode()  # 80,000 UTF-16 units, 160,000 bytes
    intake(msg=sb_message(body, message_id="m-huge"))
    (rej,) = entities(env["RejectedOrdersTableName"])
    assert rej["Kind"] == "invalid" and rej["BodyTruncated"] is True
    assert rej["Body"].startswith("\U0001F600" * 100) and len(rej["Body"]) < 30_000
    assert (rej["BodyBytes"], rej["BodySha256"]) == (len(body), hashlib.sha256(body).hexdigest())


def test_allowed_reply_queue_gets_received_status(env: dict[str, str]) -> None:
    reply_q = env["ReplyQueueAllowList"].rstrip("*") + "-r"
    bootstrap.container().queues.create_queue(reply_q)
    intake(msg=sb_message(order("o-1", reply_to=reply_q)))
    (status,) = drain_json(reply_q)
    assert (status["order_id"], status["event"]) == ("o-1", "received")


def test_reply_to_naming_the_apps_own_queue_is_rejected_whatever_the_allow_list_says(
        app_env: Callable[..., dict[str, str]]) -> None:
    """The attack: status updates put on the Scheduler's queue would be read as its commands."""
    base = app_env()
    env = app_env(ReplyQueueAllowList=base["SchedulerQueueName"][0])  # a prefix covering it
    intake(msg=sb_message(order("o-1", reply_to=env["SchedulerQueueName"]), message_id="m-1"))
    (rej,) = entities(env["RejectedOrdersTableName"])
    assert rej["Kind"] == "invalid" and "reply_to" in rej["Reason"]
    assert entities(env["StateTableName"]) == [] and drain_json(env["SchedulerQueueName"]) == []


def test_storage_outage_raises_so_service_bus_redelivers(
        app_env: Callable[..., dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    env = app_env()
    c = bootstrap.container()

    def down(*a: object, **k: object) -> None:
        raise ServiceRequestError("connection refused")

    monkeypatch.setattr(c.store, "create", down)
    with pytest.raises(ServiceRequestError):
        intake(msg=sb_message(order("o-1")))
    assert entities(env["RejectedOrdersTableName"]) == []


def _process(order_id: str, env: dict[str, str]) -> None:
    from tests.integration.test_scheduler import reply

    s = bootstrap.container().scheduler
    for q in ("InventoryRequestsQueueName", "PaymentRequestsQueueName",
              "ShippingRequestsQueueName"):
        (req,) = drain_json(env[q])
        s.handle_reply(reply(req))


def test_redelivery_of_a_settled_order_leaves_no_index_entry(env: dict[str, str]) -> None:
    intake(msg=sb_message(order("o-1")))
    _process("o-1", env)
    assert index_entries(env) == []
    assert intake(msg=sb_message(order("o-1"), delivery_count=2)) is None
    assert index_entries(env) == []
    assert drain_json(env["SchedulerQueueName"]) == []


def test_redelivery_never_takes_an_index_entry_that_was_not_its_own(
        env: dict[str, str]) -> None:
    """A settled order whose effects are not known done keeps its entry for the Supervisor."""
    c = bootstrap.container()
    intake(msg=sb_message(order("o-1")))
    real_forget = c.store.drop
    c.store.drop = lambda *a: None  # type: ignore[method-assign]  # the Scheduler died there
    _process("o-1", env)
    c.store.drop = real_forget  # type: ignore[method-assign]
    left = index_entries(env)
    assert left and {e["OrderID"] for e in left} == {"o-1"}
    intake(msg=sb_message(order("o-1"), delivery_count=2))
    assert index_entries(env) == left


def test_redelivery_during_a_supervisor_backoff_sends_no_start(env: dict[str, str]) -> None:
    c = bootstrap.container()
    intake(msg=sb_message(order("o-1")))
    drain_json(env["InventoryRequestsQueueName"])  # the Agent never answers
    st = c.store.get_state("o-1")
    assert st is not None
    # The Supervisor reset it (as at complete-by): Pending, waiting out a backoff.
    from shared.domain.supervision import supervise

    decision = supervise(st, st.complete_by + timedelta(seconds=1),  # type: ignore[operator]
                         c.supervisor._policy, c.workflow)
    assert decision is not None
    c.store.save(decision.state)
    intake(msg=sb_message(order("o-1"), delivery_count=2))
    assert drain_json(env["SchedulerQueueName"]) == []  # the backoff stands


def test_an_order_that_finishes_in_time_is_filed_once(
        app_env: Callable[..., dict[str, str]]) -> None:
    """With the deployed settings (a pending grace of 60 s, a first step of 30 s) the claim makes
    the order due sooner than a new order is; filed within the horizon (the shortest of the
    two), it needs no second entry: one written at intake, one removed when it settles."""
    env = app_env(PendingGraceSeconds="60")
    c = bootstrap.container()
    index = c.store._inflight  # type: ignore[attr-defined]
    writes: list[str] = []
    for name in ("create_entity", "delete_entity", "update_entity", "upsert_entity"):
        real = getattr(index, name)
        setattr(index, name, lambda *a, _n=name, _r=real, **k: (writes.append(_n), _r(*a, **k))[1])
    intake(msg=sb_message(order("o-1")))
    _process("o-1", env)
    assert writes == ["create_entity", "delete_entity"]
    assert index_entries(env) == []
