"""A service that is the user's own Python code, run by its Agent in the Agent's process.

Held to what an HTTP service's client is held to (remote_service.py): a JSON object back is the
step's result; ``Retry``, and any exception the service does not declare permanent, is transient
(retried within complete-by, honouring its retry-after); ``Refuse`` and the declared permanent
types are refusals. The Agent around it keeps every other guarantee: the request checked
against the record first, complete-by, backoff, the breaker, one span per call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from shared import tracing
from shared.adapters.remote_service import (
    NeedsPersonError,
    PermanentServiceError,
    TransientServiceError,
)
from shared.domain import budget, text
from shared.domain.services import Call, CodeService, NeedsPerson, Refuse, Retry
from shared.domain.step_policy import MAX_NEEDS

log = logging.getLogger(__name__)


class CodeServiceClient:
    def __init__(self, service: CodeService, settings: Mapping[str, str]) -> None:
        self._service = service
        self._settings = dict(settings)

    def call(self, call: Call, timeout: float) -> dict[str, Any]:
        """``timeout``: the Agent's per-call limit; the code reads what is left from
        ``call.time_left()`` (the smaller of the two is what it should give its provider)."""
        operation = self._service.operations.get(call.operation)
        if operation is None:
            raise PermanentServiceError(f"the {self._service.name} service has no operation "
                                        f"{call.operation!r}")
        try:
            # The trace context of this call's span: what the code hands its provider, so
            # that the provider's side joins the order's trace.
            result = operation(replace(call, settings=self._settings, traceparent=(
                tracing.current_traceparent() or call.traceparent)))
        except Retry as e:
            raise TransientServiceError(f"{call.operation}: {e}", e.retry_after,
                                        busy=e.busy) from e
        except Refuse as e:
            raise PermanentServiceError(f"{call.operation}: {e}") from e
        except NeedsPerson as e:
            # Told to the submitter: the code's words, made inert and held to a sentence.
            said = text.inert(" ".join(str(e).split()))[:MAX_NEEDS]
            raise NeedsPersonError(f"{call.operation}: {e}", said or (
                f"a person must act before {call.step} can be done")) from e
        except self._service.permanent as e:
            raise PermanentServiceError(f"{call.operation}: {_text(e)}") from e
        except Exception as e:  # the user's code: anything else is worth another try
            log.warning("%s %s: %s", self._service.name, call.operation, _text(e))
            raise TransientServiceError(f"{call.operation}: {_text(e)}") from e
        if not isinstance(result, Mapping):
            # The work may have happened: asking again under the same key gets its answer.
            raise TransientServiceError(
                f"{call.operation} returned {type(result).__name__}, not a JSON object; "
                "asking again under the same key")
        return dict(result)


def _text(e: BaseException) -> str:
    """An exception as an operator reads it: its type's name (the user's own, which says what
    happened: CardDeclined) and its message, held to the error budget."""
    return budget.clip(f"{type(e).__name__}: {e}", budget.ERROR_TEXT)
