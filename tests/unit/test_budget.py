"""Every text the app keeps from outside, and every list a record grows, stays within its size
budget in any Unicode, so a record can always be written (docs/limits.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shared.adapters.state_entity import state_to_entity
from shared.domain import budget, due_index
from shared.domain.messages import Action, AgentReply, ReplyOutcome
from shared.domain.outages import KEEP_GAPS, Gap, TickLog
from shared.domain.resubmission import resubmit
from shared.domain.state import (
    CompensationState,
    OrderState,
    ProcessState,
    RetryPolicy,
    StepStatus,
    exponential_backoff,
)
from shared.domain.supervision import DecisionKind, supervise
from shared.domain.transitions import Delivery, apply_reply, claim, receive
from shared.workflows.orders import ORDER_FULFILMENT as WF

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# Any code point a JSON string can carry, non-BMP and combining marks included.
ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=3 * budget.ERROR_TEXT)
STRING_PROPERTY = 32 * 1024  # Table Storage: UTF-16 code units in one string property


@given(text=ANY_TEXT, units=st.integers(10, 3000))
def test_clip_fits_and_keeps_what_fits(text: str, units: int) -> None:
    out = budget.clip(text, units)
    assert budget.text_units(out) <= units  # as JSON: escapes count whole
    if budget.text_units(text) <= units:
        assert out == text
    else:
        assert out.endswith("[cut]") and text.startswith(out.removesuffix(" [cut]"))


def failed_order(error: str) -> OrderState:
    s = claim(receive("o-1", WF, T0), "s1", T0, WF)
    s = apply_reply(s, AgentReply(order_id="o-1", step="reserve_inventory", action="do",
                                  attempt=1, outcome=ReplyOutcome.PERMANENT_ERROR, error=error,
                                  outbox_seq=s.outbox_seq,
                                  token=s.step("reserve_inventory").token), "s1", T0, WF)
    assert s.process_state is ProcessState.ERROR
    return s


def settle(s: OrderState) -> OrderState:
    s.compensation = CompensationState.DONE
    s.locked_by = s.complete_by = None
    for step in s.steps:
        if step.status in (StepStatus.FAILED, StepStatus.COMPENSATING):
            step.status = StepStatus.COMPENSATED
    return s


@settings(max_examples=20, deadline=None)
@given(errors=st.lists(ANY_TEXT, min_size=20, max_size=25),
       reason=st.text(st.characters(exclude_categories=("Cs",)),
                      min_size=budget.REASON_TEXT // 2, max_size=budget.REASON_TEXT))
@example(errors=["\U0001d11e" * 40_000] * 21, reason="\U0001d11e" * budget.REASON_TEXT)
def test_a_record_stays_writable_through_any_errors_and_resubmits(
        errors: list[str], reason: str) -> None:
    """A remote service's error of any size, and resubmits with the longest reason in any
    Unicode, as often as an operator likes: every string property of the record fits."""
    s = settle(failed_order(errors[0]))
    for i, error in enumerate(errors[1:] or errors):
        s = resubmit(s, T0 + timedelta(minutes=i), timedelta(seconds=30), reason)
        s = settle(_fail_again(s, error))
    entity = state_to_entity(s)
    for name, value in entity.items():
        if isinstance(value, str):
            assert budget.utf16_units(value) <= STRING_PROPERTY, name
    assert budget.json_units(s.history) <= budget.HISTORY
    assert s.history[-1]["reason"] == budget.clip(reason, budget.REASON_JSON)


def _fail_again(s: OrderState, error: str) -> OrderState:
    s = claim(s, "s1", T0, WF)
    step = s.current_step
    assert step is not None
    return apply_reply(s, AgentReply(order_id="o-1", step=step.name, action="do",
                                     attempt=step.attempt, outcome=ReplyOutcome.PERMANENT_ERROR,
                                     error=error, outbox_seq=s.outbox_seq, token=step.token),
                       "s1", T0, WF)


# --- What the budgets make of each stored property, by arithmetic (docs/limits.md) ------------
# The integration test (tests/integration/test_size_limits.py) measures the same through the
# pipeline; these hold the bounds that follow from the budgets alone.

# Per unit of a budget, the most JSON stores: a control character is a six-unit escape.
ESCAPED = "\x01"
# The longest record id: a declared sender's name at its longest, then the longest order id.
LONGEST_ID = "s" * 20 + "~" + "o:" + "9" * 126
ENTITY_BYTES = 1024 * 1024
POLICY = RetryPolicy(failure_threshold=3, pending_grace=timedelta(seconds=60),
                     backoff=exponential_backoff(timedelta(seconds=5), timedelta(seconds=300)))


def _reply(s: OrderState, step: str, action: Action, error: str | None = None,
           seq: int | None = None) -> OrderState:
    """The step's Agent replies: ok, or refused with ``error`` as an Agent clips it."""
    return apply_reply(s, AgentReply(
        order_id=s.order_id, step=step, action=action, attempt=s.step(step).attempt,
        outcome=ReplyOutcome.PERMANENT_ERROR if error else ReplyOutcome.OK,
        error=budget.clip_error(error), outbox_seq=s.outbox_seq if seq is None else seq,
        token=s.step(step).token, result=None if error or action is Action.UNDO else _largest(
            WF.result_budget(step))),
        "s1", T0, WF)


def _largest(limit: int) -> dict[str, str]:
    """A result at the step's budget, every byte of it a unit in the record."""
    return {"r": "x" * (limit - len('{"r": ""}'))}


def _refused_charge(error: str) -> OrderState:
    """The widest record's path to its failure: reserved, then the charge refused."""
    s = receive(LONGEST_ID, WF, T0, reply_to="r" * 63, message_id="m" * 128)
    s = claim(s, "s1", T0, WF, Delivery(s.outbox_seq))
    s = _reply(s, "reserve_inventory", Action.DO)
    return _reply(s, "charge_payment", Action.DO, error)


def test_the_newest_timeline_entry_always_fits_the_timeline_budget() -> None:
    """The timeline keeps what fits of the newest entries. Its largest entry (an error text at
    its budget, every unit escaped: about 12,100 units) fits alone, so the newest is always
    kept; and a transition adds one such entry at most. The whole stays below a property."""
    entry = {"at": T0.isoformat(), "cause": "reply:arrange_shipping:undo:1000000",
             "event": "compensation_failed", "step": "arrange_shipping",
             "detail": budget.clip(ESCAPED * budget.ERROR_TEXT * 2, budget.ERROR_TEXT)}
    assert budget.json_units([entry]) < budget.TIMELINE < budget.STRING_PROPERTY
    assert budget.json_units(budget.newest_within([entry] * 5, budget.TIMELINE)) \
        <= budget.TIMELINE < budget.STRING_PROPERTY


def test_a_record_at_every_budget_stays_far_below_the_entity_limit() -> None:
    """Every property of a state record at once, each at its largest (the budgets, two error
    texts escaped in the steps and in the outbox): under a fifth of the 1 MiB an entity may
    be, counted Azure's way (2 bytes a unit; 8 bytes, the name and 4 bytes a string property;
    64 bytes for each other property, more than any takes)."""
    s = _refused_charge(ESCAPED * budget.ERROR_TEXT)
    s = _reply(s, "reserve_inventory", Action.UNDO, ESCAPED * budget.ERROR_TEXT)
    entity = state_to_entity(s)
    units = {k: budget.utf16_units(v) for k, v in entity.items() if isinstance(v, str)}
    assert units["Steps"] <= 25_000 and units["Outbox"] <= 25_000  # two texts, six units each
    units.update(History=budget.HISTORY, Timeline=budget.TIMELINE)  # at their caps
    others = [k for k, v in entity.items() if not isinstance(v, str)]
    size = 4 + sum(8 + 2 * len(k) + 4 + 2 * u for k, u in units.items()) + 64 * len(others)
    assert size < ENTITY_BYTES // 5


def test_keys_and_the_tick_log_are_small_whatever_they_hold() -> None:
    """A key may be 1 KiB (512 units): the index's row key holds the longest id and a
    generation past any resubmit count. The Supervisor's tick log keeps KEEP_GAPS gaps."""
    key = due_index.key_for(LONGEST_ID, 10**9, T0)
    assert budget.utf16_units(key.row) <= 190 < 512
    gaps = tuple(Gap(T0 + timedelta(minutes=i, microseconds=1),
                     T0 + timedelta(minutes=i, seconds=30, microseconds=1))
                 for i in range(KEEP_GAPS + 5))
    log = TickLog(T0, ())
    for gap in gaps:
        log = log.with_gap(gap)
    assert len(log.gaps) == KEEP_GAPS and budget.utf16_units(log.gaps_to_json()) <= 1_500


def test_the_newest_resubmit_is_kept_in_the_history_whatever_its_text() -> None:
    s = _refused_charge(ESCAPED * budget.ERROR_TEXT)
    s = _reply(s, "reserve_inventory", Action.UNDO, ESCAPED * budget.ERROR_TEXT)
    if s.compensation is not CompensationState.FAILED:
        pytest.fail("the undo was not refused")
    reason = ESCAPED * budget.REASON_TEXT  # an operator's longest, 1,000 characters
    s = resubmit(s, T0, timedelta(seconds=30), reason, force=True)
    assert s.history and s.history[-1]["reason"] == reason


def test_an_outbox_that_carries_effects_forward_fits_in_one_string_property() -> None:
    s = _refused_charge(ESCAPED * budget.ERROR_TEXT)
    first = s.outbox_seq  # the undo of the reservation is sent under it, not confirmed
    decision = supervise(s, T0 + timedelta(minutes=1), POLICY, WF)
    if decision is None or decision.kind is not DecisionKind.REDISPATCH:
        pytest.fail(f"the Supervisor did not send the undo again: {decision}")
    s = _reply(decision.state, "reserve_inventory", Action.UNDO, ESCAPED * budget.ERROR_TEXT,
               seq=first)
    if s.compensation is not CompensationState.FAILED:
        pytest.fail("the undo was not refused")
    assert budget.utf16_units(state_to_entity(s)["Outbox"]) <= budget.STRING_PROPERTY
