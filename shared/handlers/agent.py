"""An Agent: performs one step against one remote service, inside the step's complete-by time.

It does only what the order's record shows was asked for now (docs/architecture.md, An Agent
does only what was asked), and retries transient faults while time remains. Once complete-by
has passed it sends nothing: the Supervisor may already have started another attempt.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from opentelemetry.trace import SpanKind
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

from shared import tracing
from shared.adapters.alerts import AlertSink
from shared.adapters.limits import NoSlot, ServiceLimiter
from shared.adapters.pauses import PauseReader
from shared.adapters.remote_service import (
    NeedsPersonError,
    PermanentServiceError,
    TransientServiceError,
)
from shared.adapters.state_store import OrderStore, StoredOrder
from shared.circuit_breaker import CircuitBreaker, CircuitOpen
from shared.clock import Clock
from shared.domain import budget, text
from shared.domain.alerts import AlertKind, OperatorAlert
from shared.domain.limits import Grant
from shared.domain.messages import (
    Action,
    AgentReply,
    AgentRequest,
    ReplyOutcome,
    legacy_compensates,
)
from shared.domain.provenance import Verdict, judge
from shared.domain.senders import RECORD_ID_MAX
from shared.domain.services import Call, InputFailed, step_input
from shared.domain.step_policy import StepRetry
from shared.domain.workflow import Registry, UnknownWorkflow, Workflow

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


class _Paused(Exception):
    """An operator paused the service: no call now, and no reply (the Supervisor holds the
    step and sends it again once the service is resumed)."""


class ServiceClient(Protocol):
    """How an Agent reaches its service: over the HTTP contract (RemoteServiceClient) or by
    running the user's code (CodeServiceClient). Returns the result, or raises
    TransientServiceError (retried) or PermanentServiceError (refused)."""

    def call(self, call: Call, timeout: float) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RequestCheck:
    """What an Agent checks a request against, and whom it tells of one the app never sent."""
    store: OrderStore
    workflows: Registry
    alerts: AlertSink


class Agent:
    def __init__(self, *, name: str, client: ServiceClient, policy: AgentRetryPolicy,
                 breaker: CircuitBreaker, clock: Clock, check: RequestCheck,
                 sleep: Callable[[float], None] = time.sleep,
                 pauses: PauseReader | None = None,
                 limiter: ServiceLimiter | None = None) -> None:
        self.name = name
        self._client = client
        self._policy = policy
        self._breaker = breaker
        self._clock = clock
        self._check = check
        self._sleep = sleep
        self._pauses = pauses
        self._limiter = limiter

    def _take_slot(self, complete_by: datetime, remaining: float) -> Grant:
        assert self._limiter is not None
        try:
            # A pause that comes while the call waits for its grant stops it too.
            return self._limiter.acquire(complete_by.timestamp(),
                                         min(remaining, self._policy.call_timeout),
                                         stop=self._check_paused)
        except NoSlot as e:
            raise _Expired(str(e)) from None

    def _check_paused(self) -> None:
        if self._pauses is not None:
            pause = self._pauses.current().service(self.name)
            if pause.paused:
                raise _Paused(pause.describe())

    def handle(self, body: str) -> AgentReply | None:
        """The reply to send now, or None when there must be no reply. The function sends it on
        its queue output binding, once it returns (docs/contracts.md, The Agent's reply)."""
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
        where = text.inert(f"{req.order_id}/{req.step} {req.action.value} attempt {req.attempt}")
        if self._remaining(req.complete_by) <= 0:
            log.info("agent %s: %s arrived after its complete-by; dropped", self.name, where)
            return None
        asked = self._asked_for(req, where)
        if asked is None:
            return None
        stored, workflow = asked
        started_with = self._remaining(req.complete_by)
        limit = workflow.result_budget(req.step) if workflow else budget.RESULT_BYTES
        declared = workflow.step(req.step).retry if workflow else StepRetry()
        try:
            result = self._call_with_retries(req, self._call(req, stored, workflow),
                                             declared.transient)
            reply = AgentReply(
                order_id=req.order_id, step=req.step, action=req.action, attempt=req.attempt,
                outcome=ReplyOutcome.OK, result=result, outbox_seq=req.outbox_seq,
                token=req.token, traceparent=tracing.current_traceparent() or req.traceparent)
            unkept = _unkeepable(reply, limit)
            if unkept is not None and req.action is Action.UNDO:
                reply = reply.model_copy(update={"result": None})  # an undo's answer is not kept
            elif unkept is not None:
                # Done, with an answer the record cannot keep: refused at this step, never kept
                # in part; the note in place of the answer says the work was done (transitions.py).
                log.warning("agent %s: %s: %s", self.name, where, unkept)
                reply = reply.model_copy(update={
                    "outcome": ReplyOutcome.PERMANENT_ERROR, "error": unkept,
                    "result": {"omitted": unkept}})
        except PermanentServiceError as e:
            # Whether a person must act first: only for a do (an undo's refusal is an undo's).
            needs = (None if req.action is Action.UNDO else e.needs
                     if isinstance(e, NeedsPersonError) else declared.park.get(e.status or 0))
            reply = AgentReply(order_id=req.order_id, step=req.step, action=req.action,
                               attempt=req.attempt, outcome=ReplyOutcome.PERMANENT_ERROR,
                               # A service's error body can be any size; a reply cannot.
                               error=budget.clip(str(e), budget.ERROR_TEXT),
                               needs=needs or None,
                               outbox_seq=req.outbox_seq, token=req.token,
                               # Refused: the order is in trouble; its trace is kept from here.
                               traceparent=tracing.keep(
                                   tracing.current_traceparent() or req.traceparent))
        except (TransientServiceError, CircuitOpen, _Expired, _Paused) as e:
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

    def _call(self, req: AgentRequest, stored: StoredOrder,
              workflow: Workflow | None) -> Call | PermanentServiceError:
        """The call, made from the record: the step's input from the order as stored, the
        earlier steps' results, and for an undo the result of the work it undoes."""
        state = stored.state
        step = state.step(req.step)
        earlier = state.steps[:state.steps.index(step)]
        results = {s.name: s.result for s in earlier if s.result is not None}
        compensates = None
        if req.action is Action.UNDO:
            compensates = req.compensates or legacy_compensates(req.idempotency_key)
            if not compensates:
                return PermanentServiceError("an undo request must name the work it undoes")
        try:
            declared = workflow.step(req.step).input if workflow is not None else None
            made = step_input(declared, stored.order, results)
        except InputFailed as e:
            return PermanentServiceError(str(e))
        return Call(order_id=req.order_id, step=req.step, action=req.action,
                    operation=req.operation, key=req.idempotency_key, attempt=req.attempt,
                    complete_by=req.complete_by, input=made, results=results,
                    result=step.result if req.action is Action.UNDO else None,
                    compensates=compensates, traceparent=req.traceparent, now=self._clock)

    def _asked_for(self, req: AgentRequest,
                   where: str) -> tuple[StoredOrder, Workflow | None] | None:
        """The order as stored and its workflow (None: a newer release's version), when its
        record shows this request's work in flight now."""
        stored = self._check.store.load(req.order_id)
        workflow = None
        # A newer release's order (no such version here, or a newer record): its record alone
        # says what was asked.
        if stored is not None:
            with contextlib.suppress(UnknownWorkflow):
                workflow = self._check.workflows.of_record(stored.state)
        verdict = judge(stored.state if stored else None, req, self.name, workflow)
        tracing.annotate(**{"order.request": verdict.verdict.value})
        if verdict.verdict is Verdict.IN_FLIGHT and stored is not None:
            return stored, workflow
        if verdict.verdict is Verdict.STALE:
            log.info("agent %s: %s is stale (%s); dropped", self.name, where, verdict.reason)
            return None
        # Every field of it may be made up: made inert before an operator reads it (a log line,
        # an alert's order, step and reason).
        reason = text.inert(
            f"the {self.name} Agent refused a request the app never sent ({where}, key "
            f"{req.idempotency_key}): {verdict.reason}; the service was not called")
        log.error("agent %s: %s", self.name, reason)
        fingerprint = hashlib.sha256(req.to_json().encode()).hexdigest()[:16]
        self._check.alerts.raise_alert(OperatorAlert(
            AlertKind.REQUEST_REFUSED,
            text.inert(budget.clip(req.order_id, RECORD_ID_MAX)), budget.clip(
                # The clock's time, never the request's: a sender chooses that one (a year 9999
                # would file the alert where no listing looks, and expire every real one).
                # Copies of the request are one alert by its key.
                reason, budget.ERROR_TEXT), self._clock(),
            step=text.inert(budget.clip(req.step, 128)),
            key=f"refused.{fingerprint}", source=f"{self.name} Agent"))
        return None

    def _call_with_retries(self, req: AgentRequest, call: Call | PermanentServiceError,
                           transient: frozenset[int] = frozenset()) -> dict[str, Any]:
        """``transient``: the HTTP statuses the step declares worth asking again
        (StepRetry.transient), besides the contract's."""
        if isinstance(call, PermanentServiceError):
            raise call

        def stop(rs: RetryCallState) -> bool:
            # Stop when the next wait would end past complete-by: a reply then is worthless.
            return (self._remaining(req.complete_by) - (rs.upcoming_sleep or 0)) <= 0

        calls = 0

        def attempt() -> dict[str, Any]:
            nonlocal calls
            remaining = self._remaining(req.complete_by)
            if remaining <= 0:
                raise _Expired("complete-by passed")
            self._check_paused()  # before every call: a pause stops a retrying Agent too
            if self._limiter is None:
                return call_once(remaining)
            if not self._breaker.allows():  # no grant taken for a call it would not let by
                raise CircuitOpen(f"circuit to {self.name} is open")
            held = self._take_slot(req.complete_by, remaining)
            try:
                remaining = self._remaining(req.complete_by)
                if remaining <= 0:
                    raise _Expired("complete-by passed waiting for the service's limit")
                return call_once(remaining)
            except TransientServiceError as e:
                if e.busy:  # the service is overloaded: every instance waits, not this call
                    self._limiter.slow(e.retry_after, str(e))
                raise
            finally:
                self._limiter.release(held)

        def call_once(remaining: float) -> dict[str, Any]:
            nonlocal calls
            calls += 1
            # One span per call attempt, inside the Agent's: its retries are in the trace.
            with tracing.span(f"{self.name} {req.operation}", kind=SpanKind.CLIENT,
                              parent=tracing.current_traceparent(),
                              attributes={"http.request.resend_count": calls - 1,
                                          "order.call_attempt": calls}):
                try:
                    result = self._breaker.call(
                        self._client.call, replace(call, attempt=req.attempt),
                        min(remaining, self._policy.call_timeout),
                    )
                except PermanentServiceError as e:
                    tracing.outcome(type(e).__name__, str(e))
                    if e.status in transient:
                        raise TransientServiceError(str(e)) from e
                    raise
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
            # Transient faults are retried with backoff and jitter behind the breaker, so a
            # service that keeps failing is not hammered. An open breaker means "not now": wait
            # for it within the budget, without calling.
            retry=retry_if_exception_type((TransientServiceError, CircuitOpen)),
            wait=wait, stop=stop, sleep=self._sleep, reraise=True,
        )
        return retrying(attempt)


def _unkeepable(reply: AgentReply, limit: int) -> str | None:
    """Why the service's answer cannot go back as the step's result, or None when it can: past
    the step's share of the record (``limit``), or JSON a reply cannot carry (a lone
    surrogate; nesting deeper than a reply's parser takes, about 200 levels)."""
    if reply.result is None:
        return None
    try:
        size = budget.json_bytes(reply.result)
        AgentReply.model_validate_json(reply.to_json())
    except (ValueError, RecursionError):
        return "the service's answer holds JSON a reply cannot carry"
    if size > limit:
        return (f"the service's answer is {size:,} bytes of JSON; the step keeps at most "
                f"{limit:,} (Step(result_budget=...))")
    return None
