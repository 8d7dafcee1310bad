"""Every text the app keeps from outside, and every list a record grows, stays within its size
budget in any Unicode, so a record can always be written (docs/limits.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from shared.adapters.state_store import state_to_entity
from shared.domain import budget
from shared.domain.messages import AgentReply, ReplyOutcome
from shared.domain.state import (
    CompensationState,
    OrderState,
    ProcessState,
    StepStatus,
    apply_reply,
    claim,
    receive,
    resubmit,
)
from shared.workflows.orders import ORDER_FULFILMENT as WF

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# Any code point a JSON string can carry, non-BMP and combining marks included.
ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=3 * budget.ERROR_TEXT)
STRING_PROPERTY = 32 * 1024  # Table Storage: UTF-16 code units in one string property


@given(text=ANY_TEXT, units=st.integers(10, 3000))
def test_clip_fits_and_keeps_what_fits(text: str, units: int) -> None:
    out = budget.clip(text, units)
    assert budget.utf16_units(out) <= units
    if budget.utf16_units(text) <= units:
        assert out == text
    else:
        assert out.endswith("[cut]") and text.startswith(out.removesuffix(" [cut]"))


def failed_order(error: str) -> OrderState:
    s = claim(receive("o-1", WF, T0), "s1", T0, WF).state
    s = apply_reply(s, AgentReply(order_id="o-1", step="reserve_inventory", action="do",
                                  attempt=1, outcome=ReplyOutcome.PERMANENT_ERROR, error=error,
                                  outbox_seq=s.outbox_seq), "s1", T0, WF).state
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
        s = resubmit(s, T0 + timedelta(minutes=i), timedelta(seconds=30), reason).state
        s = settle(_fail_again(s, error))
    entity = state_to_entity(s)
    for name, value in entity.items():
        if isinstance(value, str):
            assert budget.utf16_units(value) <= STRING_PROPERTY, name
    assert budget.json_units(s.history) <= budget.HISTORY
    assert s.history[-1]["reason"] == budget.clip(reason, budget.REASON_TEXT)


def _fail_again(s: OrderState, error: str) -> OrderState:
    s = claim(s, "s1", T0, WF).state
    step = s.current_step
    assert step is not None
    return apply_reply(s, AgentReply(order_id="o-1", step=step.name, action="do",
                                     attempt=step.attempt, outcome=ReplyOutcome.PERMANENT_ERROR,
                                     error=error, outbox_seq=s.outbox_seq), "s1", T0, WF).state
