"""What a committed transition causes outside the state record: its outbox.

A transition writes its effects in the same conditional write as its new state, so none can be
lost before it is sent; shared/handlers/relay.py carries them out at least once, and each is
harmless twice (docs/architecture.md, What follows a write: the outbox).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter

from shared.domain import budget
from shared.domain.alerts import AlertKind
from shared.domain.messages import Action, CommandKind, StatusEvent


class _Effect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RaiseAlert(_Effect):
    kind: Literal["alert"] = "alert"
    alert: AlertKind
    reason: str
    at: AwareDatetime
    key: str
    step: str | None = None


class SendStatus(_Effect):
    kind: Literal["status"] = "status"
    event: StatusEvent
    at: AwareDatetime
    id: str
    step: str | None = None
    detail: str | None = None


class SendCommand(_Effect):
    kind: Literal["command"] = "command"
    command: CommandKind
    reason: str
    # A retry after a backoff: the command stays invisible until then, however often it is sent.
    not_before: AwareDatetime | None = None


class Dispatch(_Effect):
    kind: Literal["dispatch"] = "dispatch"
    step: str
    action: Action
    attempt: int


class Forget(_Effect):
    """The order has settled: drop the entry its record names from the due-time index."""

    kind: Literal["forget"] = "forget"
    generation: int


# An outbox holds them in this order (transitions.emit), so whatever follows a dispatch (the
# Agent's reply) proves everything before it was done.
Effect = Annotated[RaiseAlert | SendStatus | SendCommand | Dispatch | Forget,
                   Field(discriminator="kind")]
OUTBOX: TypeAdapter[list[Effect]] = TypeAdapter(list[Effect])


def outbox_to_json(effects: list[Effect]) -> str:
    return OUTBOX.dump_json(effects).decode()


def outbox_from_json(text: str | None) -> list[Effect]:
    return OUTBOX.validate_json(text) if text else []


def has_dispatch(effects: list[Effect]) -> bool:
    return any(isinstance(e, Dispatch) for e in effects)


def delay_until(not_before: datetime | None, now: datetime) -> float:
    return max(0.0, (not_before - now).total_seconds()) if not_before else 0.0


def carried_within_budget(carried: list[Effect], fresh: list[Effect]) -> list[Effect]:
    """The carried effects, held with the fresh ones to the outbox's budget.

    Effects are carried only while no transition proves them sent, so a run of such transitions
    (a reply to an earlier request, a Supervisor's retry, another refusal) could grow the outbox
    past what a property holds, and then no write of the record would succeed. Over budget, the
    carried effects first give up their texts (the timeline keeps each whole); then the carried
    status updates go, oldest first (the submitter's courtesy copy: the record is the truth);
    then a carried alert that a newer alert of the same kind and step repeats. Every alert of a
    distinct kind and step stays, so the outbox stays bounded and no operator goes unwarned.
    """
    def fits(kept: list[Effect]) -> bool:
        return budget.utf16_units(outbox_to_json([*kept, *fresh])) <= budget.OUTBOX

    if fits(carried):
        return carried
    kept = [_shortened(e) for e in carried]
    for doomed in [*(e for e in kept if isinstance(e, SendStatus)), *_repeated_alerts(kept, fresh)]:
        if fits(kept):
            break
        kept.remove(doomed)
    return kept


def _shortened(e: Effect) -> Effect:
    if isinstance(e, RaiseAlert):
        return e.model_copy(update={"reason": budget.clip(e.reason, budget.SHORT_TEXT)})
    if isinstance(e, SendStatus) and e.detail is not None:
        return e.model_copy(update={"detail": budget.clip(e.detail, budget.SHORT_TEXT)})
    return e


def _repeated_alerts(carried: list[Effect], fresh: list[Effect]) -> list[Effect]:
    """Carried alerts, oldest first, that a later alert of the same kind and step repeats."""
    alerts = [e for e in [*carried, *fresh] if isinstance(e, RaiseAlert)]
    return [a for i, a in enumerate(alerts) if a in carried and any(
        (b.alert, b.step) == (a.alert, a.step) for b in alerts[i + 1:])]
