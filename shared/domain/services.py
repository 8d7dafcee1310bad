"""What a step's service is handed (``Call``), and what a service written as Python code
declares (``CodeService``), and the declaration of a service that speaks HTTP
(``HttpService``, for its limit): how to write one is docs/adapting.md, A service as your own code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.domain.declarations import DeclarationError
from shared.domain.limits import Limit
from shared.domain.messages import Action

# An app setting a code service reads: the names the Functions host and Bicep take.
SETTING_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{1,79}$")


@dataclass(frozen=True)
class Call:
    """One call of one operation, as the Agent makes it to an HTTP service or to the user's code
    (every attempt, the same but for ``attempt`` and the time left)."""

    order_id: str
    step: str
    action: Action
    operation: str
    # The Idempotency-Key of this piece of work: the step's work key for a do, its recorded
    # undo key for an undo. Hand it to the provider: a repeat is answered with the first answer.
    key: str
    attempt: int
    complete_by: datetime
    # What the step declares its service receives (the whole order unless it says).
    input: Mapping[str, Any]
    # The earlier steps' results, by step name (the ones that completed with a result).
    results: Mapping[str, Mapping[str, Any]]
    # An undo: the result of the work it undoes (a charge's answer, for its refund), since
    # providers undo by the id they gave, not by our key; the work key it was done under
    # (``compensates``). None for a do.
    result: Mapping[str, Any] | None = None
    compensates: str | None = None
    # The W3C trace context of this call's span: send it to the provider as `traceparent`.
    traceparent: str | None = None
    # A code service's declared settings, as the platform gives them.
    settings: Mapping[str, str] = field(default_factory=dict)
    # The Agent's clock, so that time_left is the Agent's view of it.
    now: Callable[[], datetime] | None = field(default=None, compare=False, repr=False)

    def time_left(self) -> float:
        """Seconds before complete-by: hand it to the provider's client as its timeout. A
        result returned after it is thrown away (another attempt may be under way)."""
        if self.now is None:
            raise RuntimeError("this call has no clock")
        return (self.complete_by - self.now()).total_seconds()

    def http_body(self) -> dict[str, Any]:
        """The body of the HTTP contract's POST (docs/contracts.md)."""
        body: dict[str, Any] = {"order_id": self.order_id, "step": self.step,
                                "order": dict(self.input),
                                "results": {k: dict(v) for k, v in self.results.items()}}
        if self.action is Action.UNDO:
            body["compensates"] = self.compensates
            body["result"] = None if self.result is None else dict(self.result)
        return body


class Retry(Exception):
    """Transient: call again while time remains, after ``retry_after`` seconds if given.
    ``busy``: the provider said it is overloaded (its 429). On a service with a limit, a busy
    answer or a ``retry_after`` makes every instance's calls to it wait (domain/limits.py)."""

    def __init__(self, message: str, retry_after: float | None = None, *,
                 busy: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.busy = busy


class Refuse(Exception):
    """Permanent: the provider refused the work for good and did nothing (the step fails;
    asked again under the same key, it would refuse again)."""


class NeedsPerson(Exception):
    """The provider cannot do the work until a person acts (a customer confirms a purchase),
    and did nothing: the order is parked, saying this (the message: a sentence for operators and
    the submitter, never a provider's own text), until an operator resumes it (the step asked
    again under the same key) or cancels it."""


Operation = Callable[[Call], Mapping[str, Any]]


@dataclass(frozen=True)
class CodeService:
    """A service whose operations are the user's Python functions, run by its Agent."""

    name: str
    operations: Mapping[str, Operation]
    # App settings the code reads (Call.settings); the app does not start without them.
    settings: tuple[str, ...] = ()
    # Exception types the code raises that mean "refused for good" (a provider SDK's
    # card-declined error, say); every other exception but Refuse is transient.
    permanent: tuple[type[BaseException], ...] = ()
    # Values for settings left unset in a local run (the simulators on): "{simulators}" stands
    # for where the simulated services are (a simulated provider's URL, say), "{Name}" for the
    # app setting Name.
    local: Mapping[str, str] = field(default_factory=dict)
    # Calls at once and a second across the app, as the provider allows (domain/limits.py).
    limit: Limit | None = None

    def __post_init__(self) -> None:
        if not self.operations:
            raise DeclarationError(f"code service {self.name!r} declares no operation")
        bad = [s for s in self.settings if not SETTING_NAME.match(s)]
        if bad:
            raise DeclarationError(f"code service {self.name!r}: a setting's name is 2 to 80 "
                                   "letters, digits and underscores, beginning with a letter: "
                                   f"{bad}")
        unknown = sorted(set(self.local) - set(self.settings))
        if unknown:
            raise DeclarationError(f"code service {self.name!r}: local values for settings it does "
                                   f"not declare: {unknown}")
        for op, fn in self.operations.items():
            if not callable(fn):
                raise DeclarationError(f"code service {self.name!r}: operation {op!r} is not a "
                                       "function")


@dataclass(frozen=True)
class HttpService:
    """A service that speaks the HTTP contract (docs/contracts.md), declared when it needs more
    than its name: a limit. A service a step names and nothing declares is one of these, with
    no limit."""

    name: str
    limit: Limit | None = None


# A step's declared input: the order's fields to send, or a function of the order and the
# earlier results.
InputFields = tuple[str, ...]
InputFunction = Callable[[Mapping[str, Any], Mapping[str, Mapping[str, Any]]], Mapping[str, Any]]
Input = InputFields | InputFunction | None


class InputFailed(Exception):
    """A step's declared input could not be made from the order and its results."""


def step_input(declared: Input, order: Mapping[str, Any],
               results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What a step's service receives: the whole order when the step declares nothing."""
    if declared is None:
        return dict(order)
    if isinstance(declared, tuple):
        return {name: order[name] for name in declared if name in order}
    try:
        made = declared(order, results)
    except Exception as e:  # the user's function: any failure is a refusal of the step
        raise InputFailed(f"the step's input could not be made: {type(e).__name__}: {e}"
                          ) from e
    if not isinstance(made, Mapping):
        raise InputFailed(f"the step's input function returned {type(made).__name__}, not a "
                          "JSON object")
    return dict(made)
