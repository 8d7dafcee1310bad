"""A step's own failure policy, declared with the step (``Step(retry=StepRetry(...))``): how many
times it may time out before the order fails, how long to wait between, which of its service's
answers are worth asking again, and which need a person: the order is parked (a state of its
own, with an alert saying what is needed) instead of failed and undone, until an operator
resumes it from that step, under the same key, or cancels it (docs/adapting.md, A step's
failure policy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType

from shared.domain import text
from shared.domain.declarations import DeclarationError
from shared.domain.state import doubled

# Bounds a declaration is held to: more attempts than anyone means is a mistake, and a storage
# queue delays a message at most 7 days.
MAX_ATTEMPTS = 100
MAX_BACKOFF = timedelta(days=7)

# What a person must do, as a step declares it: a sentence, shown to operators and told to the
# submitter (never a service's own error text).
MAX_NEEDS = 200


@dataclass(frozen=True)
class StepRetry:
    # Times the step may time out (in one run of the order) before the order fails; None: the
    # app's FailureThreshold, counted over the whole order.
    attempts: int | None = None
    # The wait before asking again after a timeout, doubling from the first to at most the
    # second; None: the app's RetryBackoffSeconds and RetryBackoffMaxSeconds.
    backoff: tuple[timedelta, timedelta] | None = None
    # HTTP statuses of its service's answers that are worth asking again within the step's
    # time (a 409 "still processing", say), besides the contract's (5xx, 408, 425, 429).
    transient: frozenset[int] = frozenset()
    # HTTP statuses of its service's answers that need a person, each with what is needed
    # ({402: "the customer must confirm the purchase"}). A code service raises NeedsPerson.
    park: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.attempts is not None and (type(self.attempts) is not int
                                          or not 1 <= self.attempts <= MAX_ATTEMPTS):
            raise DeclarationError(f"StepRetry(attempts=...) is a whole number from 1 to "
                                   f"{MAX_ATTEMPTS}")
        if self.backoff is not None and not (
                len(self.backoff) == 2
                and timedelta(0) < self.backoff[0] <= self.backoff[1] <= MAX_BACKOFF):
            raise DeclarationError("StepRetry(backoff=(first, longest)): 0 < first <= longest <= "
                                   f"{MAX_BACKOFF.days} days (a delayed message waits no longer)")
        for status in [*self.transient, *self.park]:
            if not 400 <= status <= 499 or status in (408, 425, 429):
                raise DeclarationError(f"StepRetry: {status} is not a 4xx the contract refuses "
                                       "(5xx, 408, 425 and 429 are asked again already)")
        both = sorted(set(self.transient) & set(self.park))
        if both:
            raise DeclarationError(f"StepRetry: {both} cannot be both transient and parked")
        for status, needs in self.park.items():
            if not needs.strip() or len(needs) > MAX_NEEDS or any(map(text.acts, needs)):
                raise DeclarationError(f"StepRetry(park={{{status}: ...}}): say what a person must "
                                       f"do, in 1 to {MAX_NEEDS} printable characters")
        # Held as declared: nothing may change it once it was found fit.
        object.__setattr__(self, "park", MappingProxyType(dict(self.park)))

    def delay(self, failures: int) -> timedelta | None:
        """The wait before retry number ``failures``, when the step declares its own."""
        if self.backoff is None:
            return None
        return doubled(*self.backoff, failures)
