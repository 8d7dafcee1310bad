"""The operator's resubmit leaves nothing behind when it cannot finish."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.state import CompensationState, ProcessState, RetryPolicy, exponential_backoff
from shared.domain.transitions import receive
from shared.domain.workflow import Registry
from shared.handlers.health import HealthProbe
from shared.handlers.operator import Operator
from shared.handlers.operator_requests import ResubmitRequest
from shared.handlers.relay import EffectRelay
from shared.workflows.orders.message import parse_order
from tests.conftest import FakeClock
from tests.fakes import (
    FakeAlertStore,
    FakeOrderStore,
    FakeQueues,
    FakeRejections,
    StorageDown,
    supervisor_over_fakes,
)
from tests.workflow import FLOW as WF

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def operator_over(store: FakeOrderStore, clock: FakeClock, workflows: Registry | None = None,
                  customer_columns: Sequence[str] = ()) -> Operator:
    """The operator over the fake stores."""
    alerts = FakeAlertStore()
    relay = EffectRelay(store=store, sender=FakeQueues(clock), alerts=alerts,
                        workflows=workflows or Registry.of([WF]), agent_queues={},
                        scheduler_queue="cmds", clock=clock)
    return Operator(store=store, relay=relay, alerts=alerts, rejections=FakeRejections(),
                    health=HealthProbe({}), pending_grace=timedelta(seconds=30), clock=clock,
                    customer_columns=customer_columns)


def test_a_resubmit_whose_save_fails_leaves_only_an_entry_the_supervisor_drops() -> None:
    clock = FakeClock(T0)

    failing = False

    def fault(op: str) -> None:
        if failing and op == "store.save":  # the record's write, after the entry's
            raise StorageDown("EntityTooLarge")

    store = FakeOrderStore(fault)
    o = parse_order(json.dumps({"order_id": "o-1", "customer_id": "c",
                                "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
    s = store.create(o, receive("o-1", WF, T0))
    s.process_state = ProcessState.ERROR
    s.compensation = CompensationState.DONE
    settled = store.save(s)
    assert settled.index_key
    store.drop(settled.index_key)  # as its Forget effect does
    op = operator_over(store, clock)
    failing = True
    with pytest.raises(StorageDown):
        op.resubmit("o-1", "try again")
    # The new generation was filed before the write that failed; no record names it.
    (entry,) = store.index.values()
    assert entry.generation == 1
    failing = False
    policy = RetryPolicy(3, exponential_backoff(timedelta(seconds=1), timedelta(seconds=4)),
                         pending_grace=timedelta(seconds=30))
    supervisor = supervisor_over_fakes(store, clock, policy)
    clock.advance(seconds=31)  # its time, and the grace for a write still on its way
    report = supervisor.tick()
    assert (report.forgotten, store.index) == (1, {})
    assert store.states["o-1"].generation == 0  # nothing else changed


@pytest.mark.parametrize(("body", "problem"), [
    (b"", None), (b"  ", None), (b'{"reason": "ok", "force": true}', None),
    (b"null", "JSON object"), (b"[1]", "JSON object"), (b"{", "JSON object"),
    (b'{"reason": 1}', "reason"), (b'{"force": 1}', "force"), (b'{"x": 1}', "x is not a field"),
])
def test_a_resubmit_body_is_read_strictly(body: bytes, problem: str | None) -> None:
    if problem is None:
        ResubmitRequest.from_body(body)
        return
    with pytest.raises(ValueError, match=problem):
        ResubmitRequest.from_body(body)


def test_a_newer_releases_record_is_not_resubmitted_by_this_one() -> None:
    """Rewritten by this release, a record of a newer schema would lose what that release
    keeps: the resubmit is refused, saying why, and the record left as it is."""
    import dataclasses

    from shared.domain.state import SCHEMA_VERSION
    from shared.handlers.operator_requests import ResubmitRefused

    clock = FakeClock(T0)
    store = FakeOrderStore()
    o = parse_order(json.dumps({"order_id": "o-9", "customer_id": "c",
                                "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
    s = store.create(o, receive("o-9", WF, T0))
    s.process_state, s.compensation = ProcessState.ERROR, CompensationState.DONE
    store.save(s)
    store.states["o-9"] = dataclasses.replace(store.states["o-9"],
                                              schema_version=SCHEMA_VERSION + 1)
    before = store.states["o-9"]
    op = operator_over(store, clock)
    with pytest.raises(ResubmitRefused, match="newer release"):
        op.resubmit("o-9", "try again")
    assert store.states["o-9"] == before and store.states["o-9"].version == before.version
    store.states["o-9"] = dataclasses.replace(before, schema_version=SCHEMA_VERSION)
    assert op.resubmit("o-9", "try again").ProcessState == "Pending"  # its own: as ever


def test_a_search_by_customer_reads_the_columns_the_message_models_name() -> None:
    """The engine names no field of the example: the models say which column is the customer;
    with none, a search by customer is refused, saying so (a 400 at the API)."""
    from shared.workflows.orders import ORDER_FULFILMENT

    # The example's Order names its own (a registry of it: whatever else a user registers).
    assert Registry.of([ORDER_FULFILMENT]).customer_columns == ["CustomerId"]
    assert Registry.of([WF]).customer_columns == []
    clock = FakeClock(T0)
    store = FakeOrderStore()
    op = operator_over(store, clock, customer_columns=Registry.of([WF]).customer_columns)
    with pytest.raises(ValueError, match="names a customer"):
        op.orders(None, 10, None, customer="c-1")


def test_a_search_by_customer_leaves_out_an_unreadable_record_as_a_listing_does() -> None:
    clock = FakeClock(T0)
    store = FakeOrderStore()
    for oid in ("s-1", "s-2"):
        o = parse_order(json.dumps({"order_id": oid, "customer_id": "c-9",
                                    "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
        store.create(o, receive(oid, WF, T0))
    store.corrupt["s-1"] = "ValueError: 'Exploded' is not a valid ProcessState"
    store.order_ids_where = (  # type: ignore[method-assign]
        lambda column, value, limit: (["s-1", "s-2"], True))
    op = operator_over(store, clock, customer_columns=["CustomerId"])
    page = op.orders(None, 10, None, customer="c-9")
    assert [o.OrderID for o in page.orders] == ["s-2"]


def test_a_search_by_customer_says_when_it_found_more_than_it_shows() -> None:
    """One page, no continuation: past its cap the answer says so, rather than pass for all of
    the customer's orders (an operator looking for a failed one would miss it)."""
    clock = FakeClock(T0)
    store = FakeOrderStore()
    for oid in ("m-1", "m-2", "m-3"):
        o = parse_order(json.dumps({"order_id": oid, "customer_id": "c-7",
                                    "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
        store.create(o, receive(oid, WF, T0))
    op = operator_over(store, clock, customer_columns=["CustomerId"])
    two = op.orders(None, 2, None, customer="c-7")
    assert [o.OrderID for o in two.orders] == ["m-1", "m-2"] and two.truncated
    three = op.orders(None, 3, None, customer="c-7")
    assert len(three.orders) == 3 and not three.truncated
    # A state narrows what is shown, not what was searched: still said.
    assert op.orders("Pending", 2, None, customer="c-7").truncated
    assert not op.orders(None, 10, None, prefix="m-").truncated  # listings page instead


def test_an_order_of_a_version_the_app_no_longer_runs_is_not_resubmitted() -> None:
    """The newcomer walk's F1: a resubmit keeps the version the order started on; with that
    version taken out of the registry the order was set Pending, and its start command raised
    UnknownWorkflow for ever. Refused, saying why; a bulk resubmit leaves it out."""
    import dataclasses

    from shared.handlers.operator_requests import BulkResubmitRequest, ResubmitRefused

    clock = FakeClock(T0)
    store = FakeOrderStore()
    o = parse_order(json.dumps({"order_id": "o-v1", "customer_id": "c",
                                "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
    s = store.create(o, receive("o-v1", WF, T0))
    s.process_state, s.compensation = ProcessState.ERROR, CompensationState.DONE
    store.save(s)
    before = store.states["o-v1"]
    only_v2 = Registry.of([dataclasses.replace(WF, version=2)])
    op = operator_over(store, clock, only_v2)
    with pytest.raises(ResubmitRefused, match="version 1, which this app does not run"):
        op.resubmit("o-v1", "try again")
    assert store.states["o-v1"] == before
    bulk = op.resubmit_many(BulkResubmitRequest(dry_run=True), "ops")
    assert bulk.Items == [] and bulk.Skipped == 1
    # The other way round, mid-rollout: an order of a version above this release's is the
    # newer release's to resubmit, and the operator is told so.
    v2 = dataclasses.replace(WF, version=2)
    s2 = store.create(parse_order(json.dumps({
        "order_id": "o-v2", "customer_id": "c",
        "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]})), receive("o-v2", v2, T0))
    s2.process_state, s2.compensation = ProcessState.ERROR, CompensationState.DONE
    store.save(s2)
    old = operator_over(store, clock)
    with pytest.raises(ResubmitRefused, match="newer release of the app"):
        old.resubmit("o-v2", "try again")


def test_the_overview_lists_rejected_intake_without_the_bodies() -> None:
    """Each body is up to 30,000 units from anyone: sixty of them made an overview of 1.5 MB.
    The overview names them; the rejected listing carries the bodies."""
    from shared.adapters.rejections import Rejection, RejectionKind

    clock, store = FakeClock(T0), FakeOrderStore()
    alerts, rejections = FakeAlertStore(), FakeRejections()
    relay = EffectRelay(store=store, sender=FakeQueues(clock), alerts=alerts,
                        workflows=Registry.of([WF]), agent_queues={}, scheduler_queue="cmds",
                        clock=clock)
    op = Operator(store=store, relay=relay, alerts=alerts, rejections=rejections,
                  health=HealthProbe({}), pending_grace=timedelta(seconds=30), clock=clock)
    for n in range(3):
        rejections.record(Rejection(RejectionKind.INVALID, "not JSON", f"m-{n}", b"x" * 30_000,
                                    1, T0, T0))
    listed = op.overview().Rejected
    assert sorted(r.MessageId or "" for r in listed) == ["m-0", "m-1", "m-2"]
    assert all(r.Body is None and r.BodyBytes == 30_000 for r in listed)
    assert all(r.Body == "x" * 30_000 for r in op.rejected(10).rejected)


def test_every_operator_action_is_an_audit_event_of_its_own(
        caplog: pytest.LogCaptureFixture) -> None:
    """The order's history is capped and rewritten with the record: who did what, when and why,
    done or refused, goes out besides, as a log record the app only adds."""
    from shared.adapters.alerts import AckRefused
    from shared.domain.alerts import AlertKind, OperatorAlert
    from shared.handlers.operator_requests import ResubmitRefused

    clock, store = FakeClock(T0), FakeOrderStore()
    o = parse_order(json.dumps({"order_id": "a-1", "customer_id": "c",
                                "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
    s = store.create(o, receive("a-1", WF, T0))
    s.process_state, s.compensation = ProcessState.ERROR, CompensationState.DONE
    store.save(s)
    op = operator_over(store, clock)
    who = "Ada (oid 00000000-0000-0000-0000-00000000000a)"
    with caplog.at_level("WARNING", logger="order_pipeline.audit"):
        op.resubmit("a-1", "card fixed", by=who)
        with pytest.raises(ResubmitRefused):
            op.resubmit("a-1", "again", force=True, by=who)
        op._alerts.raise_alert(OperatorAlert(AlertKind.ORDER_FAILED, "a-1", "x", T0, key="k"))
        (alert,) = op.alerts(10).alerts
        op.acknowledge(alert.AlertId, who, "on it")
        with pytest.raises(AckRefused):
            op.acknowledge(alert.AlertId, who)
    events = [(r.audit_action, r.audit_target, r.audit_by, r.audit_why,  # type: ignore[attr-defined]
               r.audit_outcome.split(":")[0])  # type: ignore[attr-defined]
              for r in caplog.records if r.name == "order_pipeline.audit"]
    assert events == [("resubmit", "a-1", who, "card fixed", "done"),
                      ("resubmit_with_force", "a-1", who, "again", "refused"),
                      ("acknowledge", alert.AlertId, who, "on it", "done"),
                      ("acknowledge", alert.AlertId, who, "", "refused")]


def test_a_cancelled_order_whose_undo_failed_is_listed_for_an_operator_to_finish() -> None:
    clock, store = FakeClock(T0), FakeOrderStore()
    o = parse_order(json.dumps({"order_id": "o-1", "customer_id": "c",
                                "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
    s = store.create(o, receive("o-1", WF, T0))
    s.process_state, s.compensation = ProcessState.CANCELLED, CompensationState.FAILED
    store.save(s)
    overview = operator_over(store, clock).overview()
    assert [v.OrderID for v in overview.CompensationFailed] == ["o-1"]
    assert overview.Failed == []
