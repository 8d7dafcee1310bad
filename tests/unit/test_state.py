"""Every transition of the state record, legal and illegal. Pure Python: no storage, no sleeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.alerts import AlertKind
from shared.domain.effects import Dispatch, Forget, RaiseAlert, SendCommand, SendStatus
from shared.domain.messages import Action, AgentReply, CommandKind, ReplyOutcome
from shared.domain.resubmission import resubmit
from shared.domain.state import (
    CompensationState,
    IllegalTransition,
    OrderState,
    ProcessState,
    RetryPolicy,
    StepStatus,
    exponential_backoff,
)
from shared.domain.supervision import DecisionKind, supervise
from shared.domain.transitions import (
    Delivery,
    apply_reply,
    begin_compensation,
    claim,
    receive,
)
from shared.domain.workflow import Step, Workflow
from tests.workflow import FLOW

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WF = FLOW
POLICY = RetryPolicy(
    failure_threshold=3,
    backoff=exponential_backoff(timedelta(seconds=5), timedelta(seconds=60)),
    pending_grace=timedelta(seconds=30),
    compensation_threshold=4,
    rescue_threshold=3,
)
STEPS = [s.name for s in WF.steps]


def ok(state: OrderState, step: str, action: Action = Action.DO) -> AgentReply:
    return AgentReply(order_id=state.order_id, step=step, action=action,
                      attempt=state.step(step).attempt, outcome=ReplyOutcome.OK,
                      outbox_seq=state.outbox_seq, token=state.step(step).token,
                      # What a provider answers: the id its undo will name.
                      result={"id": f"{step}-1"} if action is Action.DO else None)


def refused(state: OrderState, step: str, action: Action = Action.DO) -> AgentReply:
    return AgentReply(order_id=state.order_id, step=step, action=action,
                      attempt=state.step(step).attempt, outcome=ReplyOutcome.PERMANENT_ERROR,
                      error="refused by the service", outbox_seq=state.outbox_seq,
                      token=state.step(step).token)


def fresh() -> OrderState:
    return receive("o-1", WF, T0, reply_to="status-x")


def events(state: OrderState) -> list[str]:
    """The status events in a transition's outbox."""
    return [e.event for e in state.outbox if isinstance(e, SendStatus)]


def alerts(state: OrderState) -> list[AlertKind]:
    return [e.alert for e in state.outbox if isinstance(e, RaiseAlert)]


def command(state: OrderState) -> SendCommand | None:
    return next((e for e in state.outbox if isinstance(e, SendCommand)), None)


def due(state: OrderState) -> datetime:
    """Just past the moment the Supervisor looks at this order."""
    return (state.complete_by or state.created_at + POLICY.pending_grace) + timedelta(seconds=1)


def sup(state: OrderState, now: datetime):  # type: ignore[no-untyped-def]
    return supervise(state, now, POLICY, WF)


def start(state: OrderState, now: datetime = T0, by: str = "s1") -> OrderState:
    """Claim with the start command the record's own outbox sent."""
    return claim(state, by, now, WF, Delivery(state.outbox_seq))


def claimed() -> OrderState:
    return start(fresh())


def after_steps(n: int) -> OrderState:
    s = claimed()
    for name in STEPS[:n]:
        s = apply_reply(s, ok(s, name), "s1", T0, WF)
    return s


def test_new_order_has_the_brief_values() -> None:
    s = fresh()
    assert (s.process_state, s.locked_by, s.complete_by, s.failure_count) == (
        ProcessState.PENDING, None, None, 0)
    assert [st.status for st in s.steps] == [StepStatus.NOT_STARTED] * 3
    assert events(s) == ["received"]
    assert command(s) == SendCommand(command=CommandKind.START, reason="received")


def test_claim_locks_and_runs_the_first_step_with_its_budget() -> None:
    s = start(fresh())
    assert s.process_state is ProcessState.PROCESSING
    assert s.locked_by == "s1"
    first = s.step("hold")
    assert (first.status, first.attempt) == (StepStatus.RUNNING, 1)
    assert s.complete_by == first.complete_by == T0 + WF.steps[0].budget
    assert first.work_key == "o-1.hold.do"
    assert s.outbox == [Dispatch(step="hold", action=Action.DO, attempt=1)]


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
    t = apply_reply(s, ok(s, "hold"), "s2", T0 + timedelta(seconds=1), WF)
    assert t.step("hold").status is StepStatus.COMPLETED
    nxt = t.step("take")
    assert (nxt.status, nxt.attempt) == (StepStatus.RUNNING, 1)
    assert t.complete_by == T0 + timedelta(seconds=1) + WF.steps[1].budget
    assert events(t) == ["step_completed"]
    assert t.outbox[-1] == Dispatch(step="take", action=Action.DO, attempt=1)


def test_last_ok_reply_processes_the_order_and_frees_it() -> None:
    s = after_steps(2)
    t = apply_reply(s, ok(s, "send"), "s1", T0, WF)
    assert t.process_state is ProcessState.PROCESSED
    assert t.locked_by is None and t.complete_by is None
    assert t.is_settled
    assert events(t) == ["step_completed", "completed"]
    assert t.outbox[-1] == Forget(generation=0)  # the in-flight entry goes last


def test_duplicate_reply_is_stale() -> None:
    s = claimed()
    reply = ok(s, "hold")
    s2 = apply_reply(s, reply, "s1", T0, WF)
    with pytest.raises(IllegalTransition, match="stale"):
        apply_reply(s2, reply, "s1", T0, WF)


def test_reply_from_an_older_attempt_is_stale() -> None:
    s = claimed()
    old = ok(s, "hold")
    s.outbox = []  # its dispatch was confirmed sent
    s = sup(s, T0 + timedelta(minutes=5)).state  # reset
    s = claim(s, "s2", T0 + timedelta(minutes=6), WF)  # attempt 2
    assert s.step("hold").attempt == 2
    with pytest.raises(IllegalTransition):
        apply_reply(s, old, "s2", T0, WF)


def test_reply_for_a_step_not_running_is_stale() -> None:
    s = claimed()
    early = AgentReply(order_id="o-1", step="take", action=Action.DO, attempt=0,
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
    t = apply_reply(s, refused(s, "take"), "s1", T0, WF)
    st = t
    assert st.process_state is ProcessState.ERROR
    assert st.failed_step == "take"
    assert st.compensation is CompensationState.RUNNING
    # Refused for good: it did nothing, so the completed step is the one undone, by the
    # result its service gave.
    assert (st.step("take").status, st.step("take").in_doubt) == (StepStatus.FAILED, False)
    assert st.step("hold").status is StepStatus.COMPENSATING
    assert st.step("hold").undo_key == "o-1.hold.undo"
    assert "refused by the service" in (st.last_error or "")
    assert events(t) == ["failed"] and alerts(t) == [AlertKind.ORDER_FAILED]
    assert t.outbox[-1] == Dispatch(step="hold", action=Action.UNDO, attempt=2)


def test_permanent_error_on_first_step_has_nothing_to_undo() -> None:
    s = claimed()
    t = apply_reply(s, refused(s, "hold"), "s1", T0, WF)
    assert events(t) == ["failed", "compensated"]
    assert t.compensation is CompensationState.DONE and t.is_settled


def test_compensation_undoes_completed_steps_in_reverse_order() -> None:
    s = after_steps(2)
    s = apply_reply(s, refused(s, "send"), "s1", T0, WF)
    assert s.current_step.name == "take"  # type: ignore[union-attr]
    s = apply_reply(s, ok(s, "take", Action.UNDO), "s1", T0, WF)
    assert s.step("take").status is StepStatus.COMPENSATED
    assert s.current_step.name == "hold"  # type: ignore[union-attr]
    t = apply_reply(s, ok(s, "hold", Action.UNDO), "s1", T0, WF)
    assert t.compensation is CompensationState.DONE
    assert t.is_settled and t.locked_by is None and t.complete_by is None
    last = [e for e in t.outbox if isinstance(e, SendStatus)][-1]
    assert (last.event, last.detail) == (
        "compensated", "hold, take")


def test_a_submitter_hears_a_failures_category_and_the_operator_its_text() -> None:
    """A service's error text stays with the app (record, timeline, alert): the submitter's
    status update says which step failed and what happens now."""
    s = after_steps(1)
    s = apply_reply(s, refused(s, "take"), "s1", T0, WF)
    (status,) = [e for e in s.outbox if isinstance(e, SendStatus) and e.event == "failed"]
    (alert,) = [e for e in s.outbox if isinstance(e, RaiseAlert)]
    error = s.step("take").last_error
    assert error and error in alert.reason and status.step == "take"
    assert status.detail and error not in status.detail
    assert any(e.get("detail") == error for e in s.timeline if e["event"] == "failed")


def test_undo_reply_when_not_compensating_is_stale() -> None:
    s = after_steps(1)
    with pytest.raises(IllegalTransition):
        apply_reply(s, ok(s, "hold", Action.UNDO), "s1", T0, WF)


def test_refused_undo_fails_compensation_and_alerts() -> None:
    s = after_steps(1)
    s = apply_reply(s, refused(s, "take"), "s1", T0, WF)
    t = apply_reply(s, refused(s, "hold", Action.UNDO), "s1", T0, WF)
    assert t.compensation is CompensationState.FAILED
    assert t.step("hold").status is StepStatus.COMPENSATION_FAILED
    assert t.is_settled
    assert events(t) == ["compensation_failed"]
    assert alerts(t) == [AlertKind.COMPENSATION_FAILED]


def test_supervisor_leaves_work_that_is_not_overdue() -> None:
    s = claimed()
    assert sup(s, s.complete_by - timedelta(seconds=1)) is None  # type: ignore[operator]


def test_supervisor_resets_an_overdue_step_with_growing_backoff() -> None:
    s = claimed()
    delays = []
    for n in range(1, 3):
        s.outbox = []  # its dispatch was confirmed sent: the Agent did not answer in time
        now = s.complete_by + timedelta(seconds=1)  # type: ignore[operator]
        d = sup(s, now)
        assert d is not None and d.kind is DecisionKind.RETRY
        st = d.state
        cmd = command(st)
        assert cmd is not None and cmd.command is CommandKind.START and cmd.not_before
        delay = cmd.not_before - now
        assert (st.process_state, st.locked_by, st.failure_count) == (ProcessState.PENDING, None, n)
        assert st.complete_by == now + delay + POLICY.pending_grace
        assert st.step("hold").status is StepStatus.NOT_STARTED
        assert st.step("hold").in_doubt
        delays.append(delay)
        s = claim(st, "s1", now + delay, WF)
    assert delays == [timedelta(seconds=5), timedelta(seconds=10)]
    assert s.step("hold").attempt == 3


def test_supervisor_fails_the_order_at_the_threshold_and_undoes_the_step_in_doubt() -> None:
    s = after_steps(1)
    s.failure_count = POLICY.failure_threshold - 1
    s.outbox = []
    d = sup(s, s.complete_by + timedelta(seconds=1))  # type: ignore[operator]
    assert d is not None and d.kind is DecisionKind.FAIL
    st = d.state
    assert command(st).command is CommandKind.COMPENSATE  # type: ignore[union-attr]
    assert st.process_state is ProcessState.ERROR and st.failure_count == 3
    assert st.compensation is CompensationState.PENDING and st.locked_by is None
    assert st.step("take").status is StepStatus.FAILED
    assert st.failed_step == "take"
    assert events(st) == ["failed"] and alerts(st) == [AlertKind.ORDER_FAILED]
    # The take may have gone through before the timeout: it is learned (asked again under its
    # key) before it is undone, since its undo needs the result.
    c = begin_compensation(st, "s1", T0, WF)
    assert c.current_step.name == "take"  # type: ignore[union-attr]
    assert c.step("take").status is StepStatus.LEARNING
    assert c.compensation is CompensationState.RUNNING
    assert c.outbox[-1] == Dispatch(step="take", action=Action.DO, attempt=2)


def test_begin_compensation_needs_a_requested_compensation() -> None:
    with pytest.raises(IllegalTransition):
        begin_compensation(claimed(), "s1", T0, WF)


def test_supervisor_rescues_a_pending_order_nobody_took() -> None:
    s = fresh()
    assert sup(s, T0 + POLICY.pending_grace - timedelta(seconds=1)) is None
    d = sup(s, T0 + POLICY.pending_grace + timedelta(seconds=1))
    assert d is not None and d.kind is DecisionKind.RESCUE
    assert command(d.state).command is CommandKind.START  # type: ignore[union-attr]
    assert (d.state.failure_count, d.state.rescues) == (0, 1)
    assert d.state.complete_by is not None
    # "received" may never have gone out: it goes again, under the same id.
    assert events(d.state) == ["received"] and d.state.outbox[0] == s.outbox[0]


def test_supervisor_retries_then_gives_up_an_overdue_compensation() -> None:
    s = after_steps(1)
    s = apply_reply(s, refused(s, "take"), "s1", T0, WF)
    for n in range(1, POLICY.compensation_threshold):
        s.outbox = []
        d = sup(s, s.complete_by + timedelta(seconds=1))  # type: ignore[operator]
        assert d is not None and d.kind is DecisionKind.RETRY
        assert command(d.state).command is CommandKind.COMPENSATE  # type: ignore[union-attr]
        assert d.state.compensation_failure_count == n
        s = begin_compensation(d.state, "s1", T0, WF)
    s.outbox = []
    d = sup(s, s.complete_by + timedelta(seconds=1))  # type: ignore[operator]
    assert d is not None and d.kind is DecisionKind.FAIL
    assert d.state.compensation is CompensationState.FAILED
    assert alerts(d.state) == [AlertKind.COMPENSATION_FAILED]


def test_supervisor_forgets_settled_orders_the_scheduler_did_not() -> None:
    done = after_steps(3)
    assert sup(done, T0 + POLICY.pending_grace - timedelta(seconds=1)) is None
    d = sup(done, T0 + timedelta(days=1))
    assert d is not None and d.kind is DecisionKind.FORGET


def test_backoff_is_capped() -> None:
    b = exponential_backoff(timedelta(seconds=1), timedelta(seconds=5))
    assert [b(n).total_seconds() for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_workflow_is_data_a_user_can_change() -> None:
    wf = Workflow("one-step", (Step("only", "alpha", "hold", None, timedelta(seconds=1)),),
                  message=WF.message)
    s = claim(receive("o", wf, T0), "s", T0, wf)
    t = apply_reply(s, ok(s, "only"), "s", T0, wf)
    assert t.process_state is ProcessState.PROCESSED
    with pytest.raises(ValueError, match="unique"):
        Workflow("dup", (WF.steps[0], WF.steps[0]), message=WF.message)
    with pytest.raises(ValueError, match="unknown steps"):
        WF.with_budgets({"nope": timedelta(seconds=1)})


def test_resubmit_sends_a_settled_failed_order_round_again_and_keeps_its_history() -> None:
    s = after_steps(1)
    s = apply_reply(s, refused(s, "take"), "s1", T0, WF)
    s = apply_reply(s, ok(s, "hold", Action.UNDO), "s1", T0, WF)
    assert s.is_settled
    later = T0 + timedelta(hours=1)
    t = resubmit(s, later, timedelta(seconds=30), "the service was fixed")
    r = t
    assert (r.process_state, r.locked_by, r.failure_count, r.compensation) == (
        ProcessState.PENDING, None, 0, None)
    assert r.generation == 1 and r.complete_by == later + timedelta(seconds=30)
    assert r.failed_step is None
    assert all(st.status is StepStatus.NOT_STARTED for st in r.steps)
    assert r.step("hold").attempt == s.step("hold").attempt
    (h,) = r.history
    assert h["reason"] == "the service was fixed"
    assert "refused by the service" in h["previous_error"]
    assert h["steps"]["hold"].startswith("compensated")
    assert claim(r, "s2", later, WF).process_state is ProcessState.PROCESSING


@pytest.mark.parametrize("state", [fresh(), claimed(), after_steps(3)],
                         ids=["pending", "processing", "processed"])
def test_resubmit_refuses_an_order_that_has_not_failed(state: OrderState) -> None:
    with pytest.raises(IllegalTransition):
        resubmit(state, T0, timedelta(seconds=30))


def test_resubmit_waits_for_compensation_to_settle() -> None:
    s = after_steps(1)
    s = apply_reply(s, refused(s, "take"), "s1", T0, WF)  # undo running
    with pytest.raises(IllegalTransition, match="settled"):
        resubmit(s, T0, timedelta(seconds=30))




def test_a_transition_not_proven_by_the_outbox_it_replaces_carries_its_alerts_and_status() -> None:
    s = fresh()
    # A start command from elsewhere (a duplicate, an older rescue): "received" may never have
    # gone out, so it goes with the claim's outbox, under its own id.
    t = claim(s, "s1", T0, WF, Delivery(None))
    assert events(t) == ["received"] and t.outbox[0] == s.outbox[0]
    # The record's own start command shows "received" went before it.
    assert events(claim(s, "s1", T0, WF, Delivery(s.outbox_seq))) == []
    # A reply to an older outbox proves nothing of the newest one.
    s = claimed()
    failed = apply_reply(s, refused(s, "hold"), "s1", T0, WF)
    assert alerts(failed) == [AlertKind.ORDER_FAILED]


def test_effects_go_in_order_alerts_status_command_dispatch_forget() -> None:
    s = after_steps(1)
    t = apply_reply(s, refused(s, "take"), "s1", T0, WF)
    kinds = [e.kind for e in t.outbox]
    assert kinds == ["alert", "status", "dispatch"]
    keys = [e.key for e in t.outbox if isinstance(e, RaiseAlert)]
    assert keys == [f"o-1.{t.outbox_seq}.0"]


def test_work_key_is_recorded_once_and_named_by_the_undo() -> None:
    s = claimed()
    key = s.step("hold").work_key
    s.outbox = []
    retried = sup(s, s.complete_by + timedelta(seconds=1)).state  # type: ignore[operator]
    again = start(retried, T0 + timedelta(minutes=5))
    assert again.step("hold").attempt == 2
    assert again.step("hold").work_key == key  # the same work, asked again


def test_supervisor_resends_a_dispatch_never_confirmed_without_counting_a_failure() -> None:
    s = claimed()  # its outbox (the dispatch) was never confirmed: the Scheduler died first
    now = s.complete_by + timedelta(seconds=1)  # type: ignore[operator]
    d = sup(s, now)
    assert d is not None and d.kind is DecisionKind.REDISPATCH
    st = d.state
    assert (st.failure_count, st.rescues) == (0, 1)
    step = st.step("hold")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)  # the same attempt, again
    assert step.complete_by == now + WF.steps[0].budget == st.complete_by
    assert st.outbox[-1] == Dispatch(step="hold", action=Action.DO, attempt=1)
    # Once confirmed sent, the same overdue step is a failure that counts.
    st.outbox = []
    d2 = sup(st, st.complete_by + timedelta(seconds=1))  # type: ignore[operator]
    assert d2 is not None and d2.kind is DecisionKind.RETRY and d2.state.failure_count == 1


def test_redispatch_is_bounded_by_the_rescue_threshold() -> None:
    s = claimed()
    for _ in range(POLICY.rescue_threshold):
        s = sup(s, s.complete_by + timedelta(seconds=1)).state  # type: ignore[operator]
    d = sup(s, s.complete_by + timedelta(seconds=1))  # type: ignore[operator]
    assert d is not None and d.kind is DecisionKind.RETRY and d.state.failure_count == 1


def test_an_order_no_scheduler_takes_fails_with_an_alert_after_the_rescue_threshold() -> None:
    s = fresh()
    for n in range(1, POLICY.rescue_threshold + 1):
        d = sup(s, due(s))
        assert d is not None and d.kind is DecisionKind.RESCUE and d.state.rescues == n
        s = d.state
    d = sup(s, due(s))
    assert d is not None and d.kind is DecisionKind.FAIL
    st = d.state
    assert (st.process_state, st.compensation) == (ProcessState.ERROR,
                                                   CompensationState.PENDING)
    assert "no Scheduler took the order" in (st.last_error or "")
    assert alerts(st) == [AlertKind.ORDER_FAILED]
    # The compensation gets its own rescues, then the order settles with a second alert.
    for _ in range(POLICY.rescue_threshold + 1):
        st = sup(st, due(st)).state  # type: ignore[union-attr]
    assert st.compensation is CompensationState.FAILED and st.is_settled
    assert AlertKind.COMPENSATION_FAILED in alerts(st)


def test_progress_resets_the_rescue_count() -> None:
    s = sup(fresh(), T0 + timedelta(minutes=5)).state  # type: ignore[union-attr]
    assert s.rescues == 1
    assert start(s).rescues == 0


def _compensation_failed_after_take() -> OrderState:
    s = after_steps(2)
    s = apply_reply(s, refused(s, "send"), "s1", T0, WF)
    s = apply_reply(s, refused(s, "take", Action.UNDO), "s1", T0, WF)
    assert s.compensation is CompensationState.FAILED
    return s


def test_resubmit_after_a_failed_compensation_needs_force() -> None:
    s = _compensation_failed_after_take()
    with pytest.raises(IllegalTransition, match="force"):
        resubmit(s, T0, timedelta(seconds=30))
    assert resubmit(s, T0, timedelta(seconds=30), force=True).generation == 1


def test_forced_resubmit_never_redoes_standing_work_under_a_new_key() -> None:
    s = _compensation_failed_after_take()
    keys = {st.name: st.work_key for st in s.steps}
    r = resubmit(s, T0, timedelta(seconds=30), force=True)
    held, taken, sent = (r.step(n) for n in STEPS)
    # Never undone: still done, under its key.
    assert (held.status, held.work_key) == (StepStatus.COMPLETED,
                                                  keys["hold"])
    # Its undo was refused: asked again under the same key (the service answers with the
    # work it already has), and in doubt until then.
    assert (taken.status, taken.work_key, taken.in_doubt) == (
        StepStatus.NOT_STARTED, keys["take"], True)
    # Refused for good (it did nothing): new work, with a key of the new generation when it
    # runs, so a service that keeps a key's first answer is asked afresh.
    assert sent.work_key is None
    r = start(r)
    assert r.step("take").work_key == "o-1.take.do"
    r = apply_reply(r, ok(r, "take"), "s1", T0, WF)
    assert r.step("send").work_key == "o-1.send.g1.do"


def test_a_refused_step_is_not_undone_and_a_resubmit_gives_it_a_new_key() -> None:
    s = after_steps(1)
    t = apply_reply(s, refused(s, "take"), "s1", T0, WF)
    assert t.current_step is t.step("hold")
    t = apply_reply(t, ok(t, "hold", Action.UNDO), "s1", T0, WF)
    r = start(resubmit(t, T0, timedelta(seconds=30)))
    assert r.step("hold").work_key == "o-1.hold.g1.do"
    r = apply_reply(r, ok(r, "hold"), "s1", T0, WF)
    assert r.step("take").work_key == "o-1.take.g1.do"


def _failed_in_doubt() -> OrderState:
    """hold done; take timed out at every attempt, so the order failed with take in doubt."""
    s = after_steps(1)
    s.failure_count = POLICY.failure_threshold - 1
    s.outbox = []  # its request was sent
    d = sup(s, s.complete_by + timedelta(seconds=1))  # type: ignore[operator]
    assert d is not None and d.kind is DecisionKind.FAIL
    c = begin_compensation(d.state, "s1", T0, WF)
    c.outbox = []
    return c


def test_a_step_in_doubt_is_learned_then_undone_by_the_result_learned() -> None:
    s = _failed_in_doubt()
    learning = s.step("take")
    assert learning.status is StepStatus.LEARNING and learning.result is None
    t = apply_reply(s, ok(s, "take"), "s1", T0, WF)
    take = t.step("take")
    assert (take.status, take.result, take.undo_key) == (
        StepStatus.COMPENSATING, {"id": "take-1"}, "o-1.take.undo")
    assert t.outbox[-1] == Dispatch(step="take", action=Action.UNDO, attempt=3)
    assert any("learned" in (e.get("detail") or "") for e in t.timeline)
    t = apply_reply(t, ok(t, "take", Action.UNDO), "s1", T0, WF)
    assert t.current_step is t.step("hold")


def test_a_step_in_doubt_refused_when_asked_again_did_nothing_to_undo() -> None:
    s = _failed_in_doubt()
    t = apply_reply(s, refused(s, "take"), "s1", T0, WF)
    take = t.step("take")
    assert (take.status, take.in_doubt) == (StepStatus.FAILED, False)
    assert "nothing to undo" in (take.last_error or "")
    assert t.current_step is t.step("hold") and t.compensation is CompensationState.RUNNING


def test_learning_that_times_out_is_asked_again_then_goes_to_an_operator() -> None:
    s = _failed_in_doubt()
    for _ in range(POLICY.compensation_threshold - 1):
        d = sup(s, s.complete_by + timedelta(seconds=1))  # type: ignore[operator]
        assert d is not None and d.kind is DecisionKind.RETRY
        s = begin_compensation(d.state, "s1", T0, WF)
        s.outbox = []
        assert s.step("take").status is StepStatus.LEARNING
    d = sup(s, s.complete_by + timedelta(seconds=1))  # type: ignore[operator]
    assert d is not None and d.kind is DecisionKind.FAIL
    assert d.state.compensation is CompensationState.FAILED
    assert alerts(d.state) == [AlertKind.COMPENSATION_FAILED]


def test_an_answer_past_the_steps_result_budget_is_refused_and_undone_by_an_operator() -> None:
    """Never kept in part: the step fails with the reason, in doubt (its work was done); asked
    again, the answer is as large, so an operator undoes it, alerted."""
    s = after_steps(1)
    big = {"blob": "x" * (WF.result_budget("take") + 1)}
    reply = ok(s, "take").model_copy(update={"result": big})
    t = apply_reply(s, reply, "s1", T0, WF)
    take = t.step("take")
    # Failed, in doubt, and so at once asked again under its key (learning) to be undone.
    assert (take.status, take.in_doubt, take.result) == (StepStatus.LEARNING, True, None)
    assert "bytes of JSON" in (t.last_error or "")
    assert t.current_step is take
    t = apply_reply(t, ok(t, "take").model_copy(update={"result": big}), "s1", T0, WF)
    assert t.compensation is CompensationState.FAILED
    assert t.step("take").status is StepStatus.COMPENSATION_FAILED
    assert alerts(t) == [AlertKind.COMPENSATION_FAILED]


def test_results_are_kept_and_a_record_names_its_shape() -> None:
    from shared.domain.state import StepState, schema_of

    s = after_steps(2)
    assert [st.result for st in s.steps] == [{"id": "hold-1"}, {"id": "take-1"}, None]
    assert StepState.from_dict(s.step("take").to_dict()) == s.step("take")
    assert schema_of(s) == 2  # the release before reads it (and ignores the results)
    assert schema_of(_failed_in_doubt()) == 3  # a learning step: that release leaves it


def test_a_forced_resubmit_is_refused_while_an_undo_may_have_been_done() -> None:
    """An undo given up unanswered may have gone through: run again under its key, the step
    would be answered with work since undone, and the order end Processed without it."""
    s = after_steps(2)
    s = apply_reply(s, refused(s, "send"), "s1", T0, WF)
    s.outbox = []  # the undo of take was sent
    policy = POLICY
    for _ in range(policy.compensation_threshold - 1):
        d = sup(s, s.complete_by + timedelta(seconds=1))  # type: ignore[operator]
        assert d is not None and d.kind is DecisionKind.RETRY
        s = begin_compensation(d.state, "s1", T0, WF)
        s.outbox = []
    d = sup(s, s.complete_by + timedelta(seconds=1))  # type: ignore[operator]
    assert d is not None and d.state.compensation is CompensationState.FAILED
    take = d.state.step("take")
    assert (take.status, take.undo_in_doubt) == (StepStatus.COMPENSATION_FAILED, True)
    with pytest.raises(IllegalTransition, match="may have been undone"):
        resubmit(d.state, T0, timedelta(seconds=30), force=True)
    # Refused outright (not in doubt), the work stands: forced, it is kept under its key.
    s = apply_reply(s, refused(s, "take", Action.UNDO), "s1", T0, WF)
    assert not s.step("take").undo_in_doubt
    r = resubmit(s, T0, timedelta(seconds=30), force=True)
    assert r.step("take").work_key == "o-1.take.do" and r.step("take").result == {"id": "take-1"}
