"""Records of releases before work keys (75e3701) read with the keys their work was done under,
and an order whose key can never be known goes to an operator, never to a silent "Done".

Each case goes through the store's own reading (``state_from_entity``), from the stored form
with the work keys taken out, as those releases wrote it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.adapters.state_entity import state_from_entity, state_to_entity
from shared.domain.effects import Dispatch, RaiseAlert
from shared.domain.legacy import SCHEMA_VERSION
from shared.domain.messages import Action, AgentReply, ReplyOutcome
from shared.domain.resubmission import resubmit
from shared.domain.state import (
    CompensationState,
    OrderState,
    ProcessState,
    RetryPolicy,
    StepStatus,
    exponential_backoff,
    schema_of,
)
from shared.domain.supervision import supervise
from shared.domain.transitions import (
    UNKNOWN_WORK_KEY,
    apply_reply,
    begin_compensation,
    claim,
    receive,
)
from shared.workflows.orders import ORDER_FULFILMENT as WF

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = RetryPolicy(failure_threshold=1, backoff=exponential_backoff(
    timedelta(seconds=5), timedelta(seconds=60)), pending_grace=timedelta(seconds=30))


class _Entity(dict[str, Any]):
    metadata = {"etag": "v-old"}


def as_written_before_work_keys(state: OrderState) -> OrderState:
    """The record as a release before 75e3701 stored it: no work keys, no schema version."""
    e = state_to_entity(state)
    assert e.pop("SchemaVersion") == schema_of(state)
    for later in ("Outbox", "OutboxSeq", "OutboxCause", "Rescues", "IndexKey", "TraceParent"):
        e.pop(later, None)  # none of these existed yet either
    steps = json.loads(e["Steps"])
    for d in steps:
        d.pop("result", None)  # nor results
        d.pop("undo_key", None)
        del d["work_key"]
    e["Steps"] = json.dumps(steps)
    return state_from_entity(_Entity(e))


def ok(state: OrderState, step: str, action: Action = Action.DO) -> AgentReply:
    return AgentReply(order_id=state.order_id, step=step, action=action,
                      attempt=state.step(step).attempt, outcome=ReplyOutcome.OK,
                      outbox_seq=state.outbox_seq, token=state.step(step).token)


def answer(state: OrderState) -> AgentReply:
    """The current step's reply: a step never learned (no result kept) is asked again under its
    key first, and answers with what it did; then its undo."""
    current = state.current_step
    assert current is not None
    if current.status is StepStatus.LEARNING:
        return ok(state, current.name).model_copy(update={"result": {"id": current.name}})
    return ok(state, current.name, Action.UNDO)


def two_done_third_running() -> OrderState:
    s = claim(receive("o-1", WF, T0), "s1", T0, WF)
    s = apply_reply(s, ok(s, "reserve_inventory"), "s1", T0, WF)
    return apply_reply(s, ok(s, "charge_payment"), "s1", T0, WF)


def undo_requests(state: OrderState) -> list[str]:
    return [f"{d.step}:{state.step(d.step).work_key}" for d in state.outbox
            if isinstance(d, Dispatch) and d.action is Action.UNDO]


def test_an_old_record_failing_undoes_its_completed_work_under_the_keys_it_was_done_under(
        ) -> None:
    old = as_written_before_work_keys(two_done_third_running())
    assert {s.name: s.work_key for s in old.steps} == {
        "reserve_inventory": "o-1.reserve_inventory.do",
        "charge_payment": "o-1.charge_payment.do",
        "arrange_shipping": "o-1.arrange_shipping.do"}
    failed = supervise(old, T0 + timedelta(minutes=5), POLICY, WF)
    assert failed is not None and failed.state.compensation is CompensationState.PENDING
    s = begin_compensation(failed.state, "s2", T0 + timedelta(minutes=5), WF)
    undone = []
    while s.compensation is CompensationState.RUNNING:
        undone += undo_requests(s)
        s = apply_reply(s, answer(s), "s2", T0, WF)
    assert s.compensation is CompensationState.DONE
    assert undone == ["arrange_shipping:o-1.arrange_shipping.do",
                      "charge_payment:o-1.charge_payment.do",
                      "reserve_inventory:o-1.reserve_inventory.do"]


def test_a_step_waiting_for_its_retry_keeps_the_key_of_the_work_that_may_stand() -> None:
    s = claim(receive("o-1", WF, T0), "s1", T0, WF)
    s.steps[0].status, s.steps[0].in_doubt, s.steps[0].complete_by = (
        StepStatus.NOT_STARTED, True, None)
    assert as_written_before_work_keys(s).steps[0].work_key == "o-1.reserve_inventory.do"


def _resubmitted_once(completed_before: bool) -> OrderState:
    """Generation 1 of an order, its first step completed (in generation 0 when
    ``completed_before``, as the last resubmission's history says)."""
    s = two_done_third_running()
    s.process_state, s.compensation = ProcessState.ERROR, CompensationState.DONE
    s.steps[1].status = s.steps[2].status = StepStatus.COMPENSATED
    if not completed_before:
        s.steps[0].status = StepStatus.COMPENSATED
    s.locked_by = s.complete_by = None
    s = resubmit(s, T0, timedelta(seconds=30))
    if not completed_before:
        s = claim(s, "s1", T0, WF)
        s = apply_reply(s, ok(s, "reserve_inventory"), "s1", T0, WF)
    return s


def test_a_resubmitted_old_record_keys_what_ran_in_its_generation() -> None:
    old = as_written_before_work_keys(_resubmitted_once(completed_before=False))
    assert old.generation == 1
    assert old.step("reserve_inventory").work_key == "o-1.reserve_inventory.g1.do"
    assert old.step("charge_payment").work_key == "o-1.charge_payment.g1.do"


def test_work_whose_key_was_never_recorded_goes_to_an_operator_not_to_done() -> None:
    """Completed in an earlier generation of an old record: nothing says under which key. The
    compensation fails naming the step, with an alert; never "compensation Done"."""
    old = as_written_before_work_keys(_resubmitted_once(completed_before=True))
    assert old.step("reserve_inventory").work_key is None
    s = claim(old, "s1", T0, WF)
    s.outbox = []  # its request was sent
    failed = supervise(s, T0 + timedelta(minutes=5), POLICY, WF)
    assert failed is not None
    s = begin_compensation(failed.state, "s2", T0 + timedelta(minutes=5), WF)
    while s.compensation is CompensationState.RUNNING:
        s = apply_reply(s, answer(s), "s2", T0, WF)
    assert s.compensation is CompensationState.FAILED
    assert s.step("reserve_inventory").status is StepStatus.COMPENSATION_FAILED
    assert s.step("reserve_inventory").last_error == UNKNOWN_WORK_KEY
    (alert,) = [e for e in s.outbox if isinstance(e, RaiseAlert)]
    assert alert.step == "reserve_inventory" and "never recorded" in alert.reason


def test_todays_records_read_as_written() -> None:
    s = _resubmitted_once(completed_before=True)
    e = state_to_entity(s)
    assert e["SchemaVersion"] == schema_of(s) == 2
    assert state_from_entity(_Entity(e)).steps == s.steps


def test_the_store_reads_which_schema_a_record_was_written_in() -> None:
    """This release's records read as its own; one without a version (before 75e3701's) as
    old; one of a later schema as a newer release's, which this release leaves alone
    (tests/unit/test_newer_release.py)."""
    state = receive("o-schema", WF, T0)
    mine = state_from_entity(_Entity(state_to_entity(state)))
    assert mine.schema_version == schema_of(state) and not mine.from_newer_release
    assert not as_written_before_work_keys(state).from_newer_release
    later = state_from_entity(_Entity({**state_to_entity(state),
                                       "SchemaVersion": SCHEMA_VERSION + 1}))
    assert later.from_newer_release


def test_a_newer_releases_record_this_release_cannot_parse_is_newer_not_corrupt() -> None:
    """The version is read before anything else is trusted: a value only a later release
    knows makes the record that release's, which the handlers leave to it."""
    import pytest

    from shared.adapters.state_entity import CorruptRecord, NewerRecord
    from shared.domain.workflow import UnknownWorkflow

    e = {**state_to_entity(receive("o-held", WF, T0)), "ProcessState": "Held"}
    with pytest.raises(NewerRecord) as newer:
        state_from_entity(_Entity({**e, "SchemaVersion": SCHEMA_VERSION + 1}))
    assert isinstance(newer.value, UnknownWorkflow) and newer.value.newer
    assert "newer release" in str(newer.value)
    with pytest.raises(CorruptRecord) as corrupt:  # of this release's schema: broken
        state_from_entity(_Entity({**e, "SchemaVersion": SCHEMA_VERSION}))
    assert not isinstance(corrupt.value, NewerRecord)
