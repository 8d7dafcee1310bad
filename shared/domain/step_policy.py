"""A step's own failure policy, declared with the step (``Step(retry=StepRetry(...))``): how many
times it may time out before the order fails, how long to wait between, and which of its
service's answers are worth asking again (docs/adapting.md, A step's failure policy).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


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

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("StepRetry(attempts=...) is at least 1")
        if self.backoff is not None and not (
                timedelta(0) < self.backoff[0] <= self.backoff[1]):
            raise ValueError("StepRetry(backoff=(first, longest)): 0 < first <= longest")
        for status in self.transient:
            if not 400 <= status <= 499 or status in (408, 425, 429):
                raise ValueError(f"StepRetry: {status} is not a 4xx the contract refuses "
                                 "(5xx, 408, 425 and 429 are asked again already)")

    def delay(self, failures: int) -> timedelta | None:
        """The wait before retry number ``failures``, when the step declares its own."""
        if self.backoff is None:
            return None
        first, longest = self.backoff
        grown: timedelta = first * (2 ** max(0, failures - 1))
        return min(longest, grown)
