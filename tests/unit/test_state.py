"""Every transition of the state record, legal and illegal. Pure Python: no storage, no sleeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.messages import Action, AgentReply, ReplyOutcome
from shared.domain.state import (
    CompensationState,
    IllegalTransition,
    OrderState,
    ProcessState,
    RetryPolicy,
    StepStatus,
    apply_reply,
    begin_compensation,
    claim,
    exponential_backoff,
    new_order_state,
    supervise,
)
from shared.domain.workflow import ORDER_FULFILMENT, Step, Workflow

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WF = ORDER_FULFILMENT
POLICY = RetryPolicy(
    failure_threshold=3,
    backoff=exponential_backoff(timedelta(seconds=5), timedelta(seconds=60)),
    pending_grace=timedelta(seconds=30),
    compensation_threshold=4,
)
STEPS = [s.name for s in WF.steps]


def ok(state: OrderState, step: str, action: Action = Action.DO) -> AgentReply:
    return AgentReply(order_id=state.order_id, step=step, action=action,
                      attempt=state.step(step).attempt, outcome=ReplyOutcome.OK)


def refused(state: OrderState, step: str, action: Action = Action.DO) -> AgentReply:
    return AgentReply(order_id=state.order_id, step=step, action=action,
                      attempt=state.step(step).attempt, outcome=ReplyOutcome.PERMANENT_ERROR,
                      error="card declined")


def fresh() -> OrderState:
    return new_order_state("o-1", WF, T0, reply_to="status-x")


def claimed() -> OrderState:
    return claim(fresh(), "s1", T0, WF).state


def after_steps(n: int) -> OrderState:
    s = claimed()
    for name in STEPS[:n]:
        s = apply_reply(s, ok(s, name), "s1", T0, WF).state
    return s


def test_new_order_has_the_brief_values() -> None:
    s = fresh()
    assert (s.process_state, s.locked_by, s.complete_by, s.failure_count) == (
        ProcessState.PENDING, None, None, 0)
    assert [st.status for st in s.steps] == [StepStatus.NOT_STARTED] * 3


def test_claim_locks_and_runs_the_first_step_with_its_budget() -> None:
    s = claim(fresh(), "s1", T0, WF).state
    assert s.process_state is ProcessState.PROCESSING
    assert s.locked_by == "s1"
    first = s.step("reserve_inventory")
    assert (first.status, first.attempt) == (StepStatus.RUNNING, 1)
    assert s.complete_by == first.complete_by == T0 + WF.steps[0].budget


@pytest.mark.parametrize("state", [claimed(), after_steps(3)], ids=["processing", "processed"])
def test_claim_refuses_an_order_that_is_not_pending(state: OrderState) -> None:
    with pytest.raises(IllegalTransition):
        claim(state, "s2", T0, WF)


def test_claim_refuses_a_locked_pending_order() -> None:
    s = fresh()
    s.locked_by = "someone"
    with pytest.raises(IllegalTransition):
        claim(s, "s2", T0, WF)


def test_claim_does_not_change_the_state_it_was_given() -> None:
    s = fresh()
    claim(s, "s1", T0, WF)
    assert s.process_state is ProcessState.PENDING and s.locked_by is None


def test_each_ok_reply_completes_its_step_and_starts_the_next() -> None:
    s = claimed()
    t = apply_reply(s, ok(s, "reserve_inventory"), "s2", T0 + timedelta(seconds=1), WF)
    assert t.state.step("reserve_inventory").status is StepStatus.COMPLETED
    nxt = t.state.step("charge_payment")
    assert (nxt.status, nxt.attempt) == (StepStatus.RUNNING, 1)
    assert t.state.complete_by == T0 + timedelta(seconds=1) + WF.steps[1].budget
    assert [e.kind for e in t.events] == ["step_completed"]


def test_last_ok_reply_processes_the_order_and_frees_it() -> None:
    s = after_steps(2)
    t = apply_reply(s, ok(s, "arrange_shipping"), "s1", T0, WF)
    assert t.state.process_state is ProcessState.PROCESSED
    assert t.state.locked_by is None and t.state.complete_by is None
    assert t.state.is_settled
    assert [e.kind for e in t.events] == ["step_completed", "completed"]


def test_duplicate_reply_is_stale() -> None:
    s = claimed()
    reply = ok(s, "reserve_inventory")
    s2 = apply_reply(s, reply, "s1", T0, WF).state
    with pytest.raises(IllegalTransition, match="stale"):
        apply_reply(s2, reply, "s1", T0, WF)


def test_reply_from_an_older_attempt_is_stale() -> None:
    s = claimed()
    old = ok(s, "reserve_inventory")
    s = supervise(s, T0 + timedelta(minutes=5), POLICY).transition.state  # reset
    s = claim(s, "s2", T0 + timedelta(minutes=6), WF).state  # attempt 2
    assert s.step("reserve_inventory").attempt == 2
    with pytest.raises(IllegalTransition):
        apply_reply(s, old, "s2", T0, WF)


def test_reply_for_a_step_not_running_is_stale() -> None:
    s = claimed()
    early = AgentReply(order_id="o-1", step="charge_payment", action=Action.DO, attempt=0,
                       outcome=ReplyOutcome.OK)
    with pytest.raises(IllegalTransition):
        apply_reply(s, early, "s1", T0, WF)


def test_reply_for_an_unknown_step_is_illegal() -> None:
    s = claimed()
    bogus = AgentReply(order_id="o-1", step="nope", action=Action.DO, attempt=1,
                       outcome=ReplyOutcome.OK)
    with pytest.raises(IllegalTransition):
        apply_reply(s, bogus, "s1", T0, WF)


def test_permanent_error_fails_the_order_and_starts_undoing_completed_steps() -> None:
    s = after_steps(1)
    t = apply_reply(s, refused(s, "charge_payment"), "s1", T0, WF)
    st = t.state
    assert st.process_state is ProcessState.ERROR
    assert st.step("charge_payment").status is StepStatus.FAILED
    assert st.failed_step == "charge_payment"
    assert not st.step("charge_payment").in_doubt  # refused: nothing to undo for it
    assert st.compensation is CompensationState.RUNNING
    assert st.step("reserve_inventory").status is StepStatus.COMPENSATING
    assert st.step("reserve_inventory").attempt == 2
    assert "card declined" in (st.last_error or "")
    assert [e.kind for e in t.events] == ["failed"] and t.events[0].is_alert


def test_permanent_error_on_first_step_has_nothing_to_undo() -> None:
    s = claimed()
    t = apply_reply(s, refused(s, "reserve_inventory"), "s1", T0, WF)
    assert t.state.compensation is CompensationState.DONE
    assert t.state.is_settled
    assert [e.kind for e in t.events] == ["failed", "compensated"]


def test_compensation_undoes_completed_steps_in_reverse_order() -> None:
    s = after_steps(2)
    s = apply_reply(s, refused(s, "arrange_shipping"), "s1", T0, WF).state
    assert s.current_step.name == "charge_payment"  # type: ignore[union-attr]
    s = apply_reply(s, ok(s, "charge_payment", Action.UNDO), "s1", T0, WF).state
    assert s.step("charge_payment").status is StepStatus.COMPENSATED
    assert s.current_step.name == "reserve_inventory"  # type: ignore[union-attr]
    t = apply_reply(s, ok(s, "reserve_inventory", Action.UNDO), "s1", T0, WF)
    assert t.state.compensation is CompensationState.DONE
    assert t.state.is_settled and t.state.locked_by is None and t.state.complete_by is None
    assert t.events[-1].kind == "compensated"
    assert t.events[-1].detail == "reserve_inventory, charge_payment"


def test_undo_reply_when_not_compensating_is_stale() -> None:
    s = after_steps(1)
    with pytest.raises(IllegalTransition):
        apply_reply(s, ok(s, "reserve_inventory", Action.UNDO), "s1", T0, WF)


def test_refused_undo_fails_compensation_and_alerts() -> None:
    s = after_steps(1)
    s = apply_reply(s, refused(s, "charge_payment"), "s1", T0, WF).state
    t = apply_reply(s, refused(s, "reserve_inventory", Action.UNDO), "s1", T0, WF)
    assert t.state.compensation is CompensationState.FAILED
    assert t.state.step("reserve_inventory").status is StepStatus.COMPENSATION_FAILED
    assert t.state.is_settled
    assert [e.kind for e in t.events] == ["compensation_failed"] and t.events[0].is_alert


def test_supervisor_leaves_work_that_is_not_overdue() -> None:
    s = claimed()
    assert supervise(s, s.complete_by - timedelta(seconds=1), POLICY) is None  # type: ignore[operator]


def test_supervisor_resets_an_overdue_step_with_growing_backoff() -> None:
    s = claimed()
    delays = []
    for n in range(1, 3):
        now = s.complete_by + timedelta(seconds=1)  # type: ignore[operator]
        d = supervise(s, now, POLICY)
        assert d is not None and d.kind == "retry" and d.command == "start"
        st = d.transition.state
        assert (st.process_state, st.locked_by, st.failure_count) == (ProcessState.PENDING, None, n)
        assert st.complete_by == now + d.delay + POLICY.pending_grace
        assert st.step("reserve_inventory").status is StepStatus.NOT_STARTED
        assert st.step("reserve_inventory").in_doubt
        delays.append(d.delay)
        s = claim(st, "s1", now + d.delay, WF).state
    assert delays == [timedelta(seconds=5), timedelta(seconds=10)]
    assert s.step("reserve_inventory").attempt == 3


def test_supervisor_fails_the_order_at_the_threshold_and_undoes_the_step_in_doubt() -> None:
    s = after_steps(1)
    s.failure_count = POLICY.failure_threshold - 1
    d = supervise(s, s.complete_by + timedelta(seconds=1), POLICY)  # type: ignore[operator]
    assert d is not None and d.kind == "fail" and d.command == "compensate"
    st = d.transition.state
    assert st.process_state is ProcessState.ERROR and st.failure_count == 3
    assert st.compensation is CompensationState.PENDING and st.locked_by is None
    assert st.step("charge_payment").status is StepStatus.FAILED
    assert st.failed_step == "charge_payment"
    assert [e.kind for e in d.transition.events] == ["failed"]
    # The charge may have gone through before the timeout: it is undone first.
    c = begin_compensation(st, "s1", T0, WF).state
    assert c.current_step.name == "charge_payment"  # type: ignore[union-attr]
    assert c.compensation is CompensationState.RUNNING


def test_begin_compensation_needs_a_requested_compensation() -> None:
    with pytest.raises(IllegalTransition):
        begin_compensation(claimed(), "s1", T0, WF)


def test_supervisor_rescues_a_pending_order_nobody_took() -> None:
    s = fresh()
    assert supervise(s, T0 + POLICY.pending_grace - timedelta(seconds=1), POLICY) is None
    d = supervise(s, T0 + POLICY.pending_grace + timedelta(seconds=1), POLICY)
    assert d is not None and d.kind == "rescue" and d.command == "start"
    assert d.transition.state.failure_count == 0
    assert d.transition.state.complete_by is not None


def test_supervisor_retries_then_gives_up_an_overdue_compensation() -> None:
    s = after_steps(1)
    s = apply_reply(s, refused(s, "charge_payment"), "s1", T0, WF).state
    for n in range(1, POLICY.compensation_threshold):
        d = supervise(s, s.complete_by + timedelta(seconds=1), POLICY)  # type: ignore[operator]
        assert d is not None and d.command == "compensate" and d.kind == "retry"
        assert d.transition.state.compensation_failure_count == n
        s = begin_compensation(d.transition.state, "s1", T0, WF).state
    d = supervise(s, s.complete_by + timedelta(seconds=1), POLICY)  # type: ignore[operator]
    assert d is not None and d.kind == "fail"
    assert d.transition.state.compensation is CompensationState.FAILED
    assert [e.kind for e in d.transition.events] == ["compensation_failed"]


def test_supervisor_forgets_settled_orders_the_scheduler_did_not() -> None:
    done = after_steps(3)
    assert supervise(done, T0 + POLICY.pending_grace - timedelta(seconds=1), POLICY) is None
    d = supervise(done, T0 + timedelta(days=1), POLICY)
    assert d is not None and d.forget


def test_backoff_is_capped() -> None:
    b = exponential_backoff(timedelta(seconds=1), timedelta(seconds=5))
    assert [b(n).total_seconds() for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_workflow_is_data_a_user_can_change() -> None:
    wf = Workflow("one-step", (Step("only", "payment", "charge", None, timedelta(seconds=1)),))
    s = claim(new_order_state("o", wf, T0), "s", T0, wf).state
    t = apply_reply(s, ok(s, "only"), "s", T0, wf)
    assert t.state.process_state is ProcessState.PROCESSED
    with pytest.raises(ValueError, match="unique"):
        Workflow("dup", (WF.steps[0], WF.steps[0]))
    with pytest.raises(ValueError, match="unknown steps"):
        WF.with_budgets({"nope": timedelta(seconds=1)})


def test_resubmit_sends_a_settled_failed_order_round_again_and_keeps_its_history() -> None:
    from shared.domain.state import resubmit

    s = after_steps(1)
    s = apply_reply(s, refused(s, "charge_payment"), "s1", T0, WF).state
    s = apply_reply(s, ok(s, "reserve_inventory", Action.UNDO), "s1", T0, WF).state
    assert s.is_settled
    later = T0 + timedelta(hours=1)
    t = resubmit(s, later, timedelta(seconds=30), "card limit raised")
    r = t.state
    assert (r.process_state, r.locked_by, r.failure_count, r.compensation) == (
        ProcessState.PENDING, None, 0, None)
    assert r.generation == 1 and r.complete_by == later + timedelta(seconds=30)
    assert r.failed_step is None
    assert all(st.status is StepStatus.NOT_STARTED for st in r.steps)
    assert r.step("reserve_inventory").attempt == s.step("reserve_inventory").attempt
    (h,) = r.history
    assert h["reason"] == "card limit raised" and "card declined" in h["previous_error"]
    assert h["steps"]["reserve_inventory"].startswith("compensated")
    assert claim(r, "s2", later, WF).state.process_state is ProcessState.PROCESSING


@pytest.mark.parametrize("state", [fresh(), claimed(), after_steps(3)],
                         ids=["pending", "processing", "processed"])
def test_resubmit_refuses_an_order_that_has_not_failed(state: OrderState) -> None:
    from shared.domain.state import resubmit

    with pytest.raises(IllegalTransition):
        resubmit(state, T0, timedelta(seconds=30))


def test_resubmit_waits_for_compensation_to_settle() -> None:
    from shared.domain.state import resubmit

    s = after_steps(1)
    s = apply_reply(s, refused(s, "charge_payment"), "s1", T0, WF).state  # undo running
    with pytest.raises(IllegalTransition, match="settled"):
        resubmit(s, T0, timedelta(seconds=30))


def test_idempotency_key_is_new_for_a_resubmitted_order() -> None:
    from shared.domain.messages import idempotency_key

    assert idempotency_key("o", "s", Action.DO) == "o.s.do"
    assert idempotency_key("o", "s", Action.UNDO, 2) == "o.s.g2.undo"
