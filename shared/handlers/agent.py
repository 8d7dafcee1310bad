"""An Agent: performs one step against one remote service, inside the step's complete-by time.

Retries transient faults with exponential backoff and jitter while time remains, behind a circuit
breaker so a service that keeps failing is not hammered (while it is open the Agent waits for it,
within the budget, without calling). Replies ok, or with an error for a fault
it knows is permanent. Once the complete-by time has passed it stops and sends nothing: the
Supervisor may already have started another attempt.

Before calling, it reads the order's record and does only what the record says the Scheduler
asked for now (shared/domain/provenance.py): a request anyone else put on its queue, or sent
through the host's admin API, is dropped and reported to the operator, and the service is sent
the order as stored, not as the request carries it. One read per request.

The reply goes out on the function's queue output binding: the host sends it after the function
returns, or fails the invocation (and the request comes again) if it cannot, and it wakes the
Scheduler's listener on that queue at once when both run on one instance (the host's shared queue
watcher; a send from inside the function would wait for that listener's next poll).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from opentelemetry.trace import SpanKind
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

from shared import tracing
from shared.adapters.alerts import AlertSink
from shared.adapters.remote_service import (
    PermanentServiceError,
    RemoteServiceClient,
    TransientServiceError,
)
from shared.adapters.state_store import OrderStore
from shared.circuit_breaker import CircuitBreaker, CircuitOpen
from shared.clock import Clock
from shared.domain import budget
from shared.domain.alerts import AlertKind, OperatorAlert
from shared.domain.messages import (
    Action,
    AgentReply,
    AgentRequest,
    ReplyOutcome,
    legacy_compensates,
)
from shared.domain.provenance import Verdict, judge
from shared.domain.workflow import Registry, UnknownWorkflow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentRetryPolicy:
    base_delay: float
    max_delay: float
    call_timeout: float


def new_breaker(name: str, failures: int, reset_seconds: float,
                window_seconds: float) -> CircuitBreaker:
    # A refusal (permanent fault) is the service working as designed, not a sign of ill health.
    return CircuitBreaker(name, failures, reset_seconds, window_seconds=window_seconds,
                          ignore=(PermanentServiceError,))


class _Expired(Exception):
    pass


@dataclass(frozen=True)
class Records:
    """What an Agent checks a request against, and whom it tells of one the app never sent."""
    store: OrderStore
    workflows: Registry
    alerts: AlertSink


class Agent:
    def __init__(self, *, name: str, client: RemoteServiceClient, policy: AgentRetryPolicy,
                 breaker: CircuitBreaker, clock: Clock, records: Records,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.name = name
        self._client = client
        self._policy = policy
        self._breaker = breaker
        self._clock = clock
        self._records = records
        self._sleep = sleep

    def handle(self, body: str) -> AgentReply | None:
        """The reply to send now, or None when there must be no reply."""
        req = AgentRequest.model_validate_json(body)
        with tracing.span(f"agent {self.name}", parent=req.traceparent,
                          attributes=tracing.order_attributes(
                              req.order_id, req.step, req.attempt,
                              **{"order.action": req.action.value,
                                 "order.work_key": req.idempotency_key})):
            reply = self._handle(req)
            tracing.outcome("no reply" if reply is None else reply.outcome.value,
                            reply.error if reply is not None else None)
            return reply

    def _handle(self, req: AgentRequest) -> AgentReply | None:
        where = f"{req.order_id}/{req.step} {req.action.value} attempt {req.attempt}"
        if self._remaining(req.complete_by) <= 0:
            log.info("agent %s: %s arrived after its complete-by; dropped", self.name, where)
            return None
        order = self._asked_for(req, where)
        if order is None:
            return None
        started_with = self._remaining(req.complete_by)
        try:
            result = self._call_with_retries(req, order)
            reply = _readable(AgentReply(
                order_id=req.order_id, step=req.step, action=req.action, attempt=req.attempt,
                outcome=ReplyOutcome.OK, result=_within_budget(result, where),
                outbox_seq=req.outbox_seq, token=req.token,
                traceparent=tracing.current_traceparent() or req.traceparent), where)
        except PermanentServiceError as e:
            reply = AgentReply(order_id=req.order_id, step=req.step, action=req.action,
                               attempt=req.attempt, outcome=ReplyOutcome.PERMANENT_ERROR,
                               # A service's error body can be any size; a reply cannot.
                               error=budget.clip(str(e), budget.ERROR_TEXT),
                               outbox_seq=req.outbox_seq, token=req.token,
                               # Refused: the order is in trouble; its trace is kept from here.
                               traceparent=tracing.keep(
                                   tracing.current_traceparent() or req.traceparent))
        except (TransientServiceError, CircuitOpen, _Expired) as e:
            log.warning("agent %s: %s gave up, no reply: %s", self.name, where, e)
            return None
        if self._remaining(req.complete_by) <= 0:
            log.warning("agent %s: %s finished %.1fs after complete-by (%.1fs were left when it"
                        " started); no reply", self.name, where,
                        -self._remaining(req.complete_by), started_with)
            return None
        return reply

    def _remaining(self, complete_by: datetime) -> float:
        return (complete_by - self._clock()).total_seconds()

    def _asked_for(self, req: AgentRequest, where: str) -> dict[str, Any] | None:
        """The order as stored, when its record shows this request's work in flight now."""
        stored = self._records.store.load(req.order_id)
        workflow = None
        # A newer release's order (no such version here, or a newer record): its record alone
        # says what was asked.
        if stored is not None:
            with contextlib.suppress(UnknownWorkflow):
                workflow = self._records.workflows.of_record(stored.state)
        verdict = judge(stored.state if stored else None, req, self.name, workflow)
        tracing.annotate(**{"order.request": verdict.verdict.value})
        if verdict.verdict is Verdict.IN_FLIGHT and stored is not None:
            return stored.order
        if verdict.verdict is Verdict.STALE:
            log.info("agent %s: %s is stale (%s); dropped", self.name, where, verdict.reason)
            return None
        reason = (f"the {self.name} Agent refused a request the app never sent ({where}, key "
                  f"{req.idempotency_key}): {verdict.reason}; the service was not called")
        log.error("agent %s: %s", self.name, reason)
        fingerprint = hashlib.sha256(req.to_json().encode()).hexdigest()[:16]
        self._records.alerts.raise_alert(OperatorAlert(
            AlertKind.REQUEST_REFUSED, budget.clip(req.order_id, 128), budget.clip(
                # The clock's time, never the request's: a sender chooses that one (a year 9999
                # would file the alert where no listing looks, and expire every real one).
                # Copies of the request are one alert by its key.
                reason, budget.ERROR_TEXT), self._clock(), step=budget.clip(req.step, 128),
            key=f"refused.{fingerprint}"))
        return None

    def _call_with_retries(self, req: AgentRequest, order: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"order_id": req.order_id, "step": req.step, "order": order}
        if req.action is Action.UNDO:
            compensates = req.compensates or legacy_compensates(req.idempotency_key)
            if not compensates:
                raise PermanentServiceError("an undo request must name the work it undoes")
            body["compensates"] = compensates

        def stop(rs: RetryCallState) -> bool:
            # Stop when the next wait would end past complete-by: a reply then is worthless.
            return (self._remaining(req.complete_by) - (rs.upcoming_sleep or 0)) <= 0

        calls = 0

        def attempt() -> dict[str, Any]:
            nonlocal calls
            remaining = self._remaining(req.complete_by)
            if remaining <= 0:
                raise _Expired("complete-by passed")
            calls += 1
            # One span per call attempt, inside the Agent's: its retries are in the trace.
            with tracing.span(f"{self.name} {req.operation}", kind=SpanKind.CLIENT,
                              parent=tracing.current_traceparent(),
                              attributes={"http.request.resend_count": calls - 1,
                                          "order.call_attempt": calls}):
                try:
                    result = self._breaker.call(
                        self._client.call, req.operation, req.idempotency_key, body,
                        min(remaining, self._policy.call_timeout),
                    )
                except Exception as e:
                    tracing.outcome(type(e).__name__, str(e))
                    raise
                tracing.outcome("ok")
                return result

        backoff = wait_exponential_jitter(multiplier=self._policy.base_delay,
                                          max=self._policy.max_delay,
                                          jitter=self._policy.base_delay)

        def wait(rs: RetryCallState) -> float:
            # Honour the service's Retry-After; if it lies past complete-by, stop() gives up.
            error = rs.outcome.exception() if rs.outcome else None
            asked = getattr(error, "retry_after", None) or 0.0
            return max(backoff(rs), asked)

        retrying = Retrying(
            # An open breaker means "not now": wait for it within the budget, without calling.
            retry=retry_if_exception_type((TransientServiceError, CircuitOpen)),
            wait=wait, stop=stop, sleep=self._sleep, reraise=True,
        )
        return retrying(attempt)


def _readable(reply: AgentReply, where: str) -> AgentReply:
    """The reply as the Scheduler will read it. The work is done whatever the service said in
    its answer; one nested deeper than a reply's parser takes (about 200 levels) would fail
    every delivery of the reply, and the order would fail over an answer nothing reads."""
    try:
        AgentReply.model_validate_json(reply.to_json())
        return reply
    except (ValueError, RecursionError) as e:
        log.warning("agent: %s: the service's answer cannot be passed on: %s", where,
                    str(e)[:200])
        return reply.model_copy(update={"result": {
            "omitted": "the service's answer is nested deeper than a reply can carry",
            "bytes": 0}})


def _within_budget(result: dict[str, Any] | None, where: str) -> dict[str, Any] | None:
    """The service's answer, if it fits a reply; else a note of its size. The work is done
    either way, and a reply too large for its queue would fail every attempt to send it, so
    the step would time out and the order fail over an answer nothing in the engine reads."""
    if result is None:
        return None
    try:
        size = len(json.dumps(result, ensure_ascii=False).encode())
    except (ValueError, RecursionError) as e:  # a lone surrogate UTF-8 cannot carry, say
        log.warning("agent: %s: the service's answer cannot be passed on: %s", where, e)
        return {"omitted": "the service's answer holds text a reply cannot carry", "bytes": 0}
    if size <= budget.RESULT_BYTES:
        return result
    log.warning("agent: %s: the service answered %d bytes; the reply passes on only its size",
                where, size)
    return {"omitted": f"the service's answer was {size:,} bytes of JSON; a reply passes on "
                       f"at most {budget.RESULT_BYTES:,}", "bytes": size}
