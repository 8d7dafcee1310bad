"""What each function in function_app.py calls: unwrap the trigger, call the handler.

Exceptions propagate on purpose: the host then retries the message (and in the end moves it to
the poison queue or the dead-letter queue), which is what we want for faults we did not expect.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import azure.functions as func
from azure.core.exceptions import AzureError
from opentelemetry.trace import SpanKind

from shared import bootstrap, tracing
from shared.adapters.state_store import CorruptRecord, NewerRecord
from shared.contracts.openapi import openapi_document
from shared.handlers.failures import describe, plain
from shared.handlers.operator_requests import (
    MAX_PAGE,
    AckRefused,
    AckRequest,
    AlertNotFound,
    BulkResubmitRequest,
    OrderNotFound,
    ResubmitRefused,
    ResubmitRequest,
)
from shared.handlers.principal import (
    READ_ROLE,
    RESUBMIT_ROLE,
    Forbidden,
    Principal,
    Unauthenticated,
    authorise,
)
from shared.settings import Settings, load_settings

CONSOLE = Path(__file__).parent / "console"
# What the console page loads besides itself, by name (?asset=): its script and its styles live
# in files of their own so the page's policy can forbid inline script and style altogether.
CONSOLE_ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}
# The page runs only this app's own files and talks only to this app; nothing may frame it,
# rebase its relative addresses or be the target of a form it holds (its one form is sent by
# its script, as JSON).
CONSOLE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; "
                  "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                  "form-action 'none'; frame-ancestors 'none'")
# On every answer of the API: nothing of an operator's data kept in a cache on the way or in
# the browser, and a JSON body never taken for something else (a script, a page).
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}

# The Python worker sets the root logger to INFO and forwards every record to the host, where
# Application Insights ingests (and bills) it; at INFO the Azure SDK logs every HTTP request and
# response, dozens per order, and httpx one record per remote-service call. Their warnings and
# errors still go through.
for _sdk in ("azure", "httpx", "httpcore"):
    logging.getLogger(_sdk).setLevel(logging.WARNING)

log = logging.getLogger(__name__)


def check_settings() -> Settings:
    """Fail at start-up, naming the setting, rather than on the first message; and set up
    tracing from the standard OpenTelemetry variables (nothing when none is set)."""
    settings = load_settings()
    settings.registry(bootstrap.configured())
    tracing.configure(sample_ratio=settings.trace_sample_ratio)
    return settings


def intake(msg: func.ServiceBusMessage) -> None:
    sent = msg.enqueued_time_utc  # naive UTC, as the worker gives it
    props = msg.application_properties or {}
    bootstrap.container().intake.handle(
        msg.message_id, msg.get_body(), msg.delivery_count or 1,
        sent.replace(tzinfo=UTC) if sent else None,
        # The sender's trace context: ours, or the one the Service Bus SDK sets when traced.
        _text(props.get(tracing.TRACEPARENT) or props.get("Diagnostic-Id")))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _redelivered(msg: func.QueueMessage) -> bool:
    return (msg.dequeue_count or 1) > 1


def scheduler_command(msg: func.QueueMessage) -> None:
    bootstrap.container().scheduler.handle_command(msg.get_body().decode(), _redelivered(msg))


def scheduler_reply(msg: func.QueueMessage) -> None:
    bootstrap.container().scheduler.handle_reply(msg.get_body().decode(), _redelivered(msg))


def agent(name: str, msg: func.QueueMessage, reply: func.Out[str]) -> None:
    answer = bootstrap.container().agents[name].handle(msg.get_body().decode())
    if answer is not None:
        reply.set(answer.to_json())


def supervisor(timer: func.TimerRequest) -> None:
    bootstrap.container().supervisor.tick()


def _json(body: Any, status: int = 200) -> func.HttpResponse:
    return func.HttpResponse(json.dumps(body, default=str), status_code=status,
                             mimetype="application/json", headers=NO_STORE)


def _error(status: int, message: str) -> func.HttpResponse:
    return _json({"error": message}, status)


def _limit(req: func.HttpRequest) -> int:
    text = req.params.get("limit", "50")
    # ASCII digits, a few: str.isdigit() takes "²" (int() refuses it, in Python's words) and
    # other scripts' digits, and int() refuses past 4,300 of them.
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise ValueError(f"limit must be a whole number from 1 to {MAX_PAGE}, not {text[:20]!r}")
    return int(text)


def _unreadable(e: CorruptRecord) -> func.HttpResponse:
    if isinstance(e, NewerRecord):  # not broken: the next release's, mid-rollout
        return _error(409, f"the state record of order {e.order_id} was written by a newer "
                           "release of the app: its own operator API reads it")
    # Our data, not the caller's fault: say which record and what is wrong with it.
    return _error(500, f"the state record of order {e.order_id} is unreadable by this "
                       f"version of the app: {plain(e.reason)}")


def _cross_site(req: func.HttpRequest) -> func.HttpResponse | None:
    """A change asked for by another site's page in the operator's browser, which carries the
    platform's session cookie (cross-site request forgery). Browsers say where a request comes
    from (Sec-Fetch-Site), and a page elsewhere can send a body only as a form or plain text
    without the app's leave (CORS): the console and the CLI send JSON, or no body at all."""
    if (req.headers.get("Sec-Fetch-Site") or "").lower() == "cross-site":
        return _error(403, "a change asked for from another site's page is not accepted")
    kind = (req.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if kind and kind != "application/json":
        return _error(415, f"send the body as JSON (Content-Type: application/json), not "
                           f"{kind[:60]}")
    return None


def _as_operator(role: str, handle: Callable[[func.HttpRequest, Principal], func.HttpResponse]
                 ) -> Callable[[func.HttpRequest], func.HttpResponse]:
    """An operator route: the caller's identity with ``role`` first (shared/handlers/principal.py),
    whatever key came with the request: keys are for machine callers, not operators."""
    def route(req: func.HttpRequest) -> func.HttpResponse:
        if req.method == "POST" and (refused := _cross_site(req)) is not None:
            return refused
        try:
            principal = authorise(req.headers, role, os.environ,
                                  bootstrap.container().settings.operator_development_roles)
        except Unauthenticated as e:
            return _error(401, str(e))
        except Forbidden as e:
            return _error(403, str(e))
        try:
            return handle(req, principal)
        except AzureError as e:  # storage down or refusing: said, not a bare 500
            log.warning("operator route %s: storage failed", req.url, exc_info=True)
            return _error(503, f"storage {describe(e)}; try again shortly")
    return route


def _get_order(req: func.HttpRequest, _: Principal) -> func.HttpResponse:
    order_id = req.route_params.get("order_id", "")
    try:
        return _json(bootstrap.container().operator.get(order_id))
    except ValueError as e:  # not an order id
        return _error(400, str(e))
    except OrderNotFound:
        return _error(404, f"no order {order_id!r}")
    except CorruptRecord as e:
        return _unreadable(e)


def _list_orders(req: func.HttpRequest, _: Principal) -> func.HttpResponse:
    state = req.params.get("state")  # present but empty is a bad state, not "any"
    try:
        limit = _limit(req)
        page = bootstrap.container().operator.list(
            state, limit, req.params.get("continuation"), prefix=req.params.get("prefix"),
            customer=req.params.get("customer"))
    except ValueError as e:  # a bad state, limit or continuation token
        return _error(400, str(e))
    return _json({"orders": page.items, "continuation": page.continuation,
                  "truncated": page.truncated})


def _resubmit_order(req: func.HttpRequest, principal: Principal) -> func.HttpResponse:
    order_id = req.route_params.get("order_id", "")
    try:
        body = ResubmitRequest.from_body(req.get_body())
        return _json(bootstrap.container().operator.resubmit(
            order_id, body.reason, body.force, by=principal.label()), 202)
    except ValueError as e:  # the body, the reason or the id
        return _error(400, str(e))
    except OrderNotFound:
        return _error(404, f"no order {order_id!r}")
    except ResubmitRefused as e:
        return _error(409, str(e))
    except CorruptRecord as e:
        return _unreadable(e)


def _resubmit_orders(req: func.HttpRequest, principal: Principal) -> func.HttpResponse:
    try:
        ask = BulkResubmitRequest.from_body(req.get_body())
    except ValueError as e:
        return _error(400, str(e))
    return _json(bootstrap.container().operator.resubmit_many(ask, by=principal.label()),
                 200 if ask.dry_run else 202)


def _overview(req: func.HttpRequest, _: Principal) -> func.HttpResponse:
    return _json(bootstrap.container().operator.overview())


def _list_rejected(req: func.HttpRequest, _: Principal) -> func.HttpResponse:
    try:
        limit = _limit(req)
        page = bootstrap.container().operator.rejected(limit, req.params.get("continuation"))
    except ValueError as e:  # a bad limit or continuation token
        return _error(400, str(e))
    return _json({"rejected": page.items, "continuation": page.continuation})


_ACKNOWLEDGED = {"true": True, "false": False}


def _list_alerts(req: func.HttpRequest, _: Principal) -> func.HttpResponse:
    which = req.params.get("acknowledged")
    try:
        if which is not None and which not in _ACKNOWLEDGED:
            raise ValueError("acknowledged must be true or false (or left out for both)")
        limit = _limit(req)
        page = bootstrap.container().operator.alerts(
            limit, acknowledged=None if which is None else _ACKNOWLEDGED[which])
    except ValueError as e:  # a bad filter or limit
        return _error(400, str(e))
    return _json({"alerts": page.items, "truncated": page.truncated})


def _ack_alert(req: func.HttpRequest, principal: Principal) -> func.HttpResponse:
    alert_id = req.route_params.get("alert_id", "")
    try:
        body = AckRequest.from_body(req.get_body())
        return _json(bootstrap.container().operator.acknowledge(
            alert_id, principal.label(), body.note))
    except ValueError as e:  # the body or the id
        return _error(400, str(e))
    except AlertNotFound:
        return _error(404, f"no alert {alert_id!r} (alerts are kept as long as the table's "
                           "rows: the listing shows the last 7 days)")
    except AckRefused as e:
        return _error(409, str(e))


get_order = _as_operator(READ_ROLE, _get_order)
list_orders = _as_operator(READ_ROLE, _list_orders)
resubmit_order = _as_operator(RESUBMIT_ROLE, _resubmit_order)
# A dry run writes nothing, but it is the rehearsal of a resubmit: the same role.
resubmit_orders = _as_operator(RESUBMIT_ROLE, _resubmit_orders)
overview = _as_operator(READ_ROLE, _overview)
list_rejected = _as_operator(READ_ROLE, _list_rejected)
list_alerts = _as_operator(READ_ROLE, _list_alerts)
# Acknowledging acts on what operators share, as resubmitting does: the same role (a reader
# only looks). A role of its own would need the app registration's roles changed everywhere
# for a lesser act than a resubmit.
ack_alert = _as_operator(RESUBMIT_ROLE, _ack_alert)


def console(req: func.HttpRequest) -> func.HttpResponse:
    # The page itself holds no data: every figure on it comes from a route above, with the
    # operator's identity (the platform's session cookie in Azure).
    asset = req.params.get("asset")
    if asset is None:
        body, mimetype = (CONSOLE / "console.html").read_bytes(), "text/html"
    elif asset in CONSOLE_ASSETS:
        body, mimetype = (CONSOLE / asset).read_bytes(), CONSOLE_ASSETS[asset]
    else:
        return func.HttpResponse(b"", status_code=404, headers=NO_STORE)
    return func.HttpResponse(body, mimetype=mimetype, headers={
        "Content-Security-Policy": CONSOLE_POLICY, **NO_STORE, "Referrer-Policy": "no-referrer"})


def openapi(req: func.HttpRequest) -> func.HttpResponse:
    return _json(openapi_document())


def health(req: func.HttpRequest) -> func.HttpResponse:
    # A machine route: the verdict and each check's, never why (the operator's route says).
    report = bootstrap.container().operator.health()
    return _json(report, 200 if report["status"] == "ok" else 503)


def _health_details(req: func.HttpRequest, _: Principal) -> func.HttpResponse:
    report = bootstrap.container().operator.health(detailed=True)
    return _json(report, 200 if report["status"] == "ok" else 503)


health_details = _as_operator(READ_ROLE, _health_details)


def simulated_service(req: func.HttpRequest) -> func.HttpResponse:
    c = bootstrap.container()
    if not c.settings.simulators_enabled:
        return func.HttpResponse("simulated services are off (SimulatorsEnabled)", status_code=404)
    try:
        body = req.get_json() if req.get_body() else {}
    except (ValueError, RecursionError):  # not JSON, or nested past the parser
        return func.HttpResponse('{"error": "body is not JSON"}', status_code=400,
                                 mimetype="application/json")
    service, operation = req.route_params.get("service", ""), req.route_params.get("operation", "")
    # As a real service would: its work joins the caller's trace.
    with tracing.span(f"service {service} {operation}", kind=SpanKind.SERVER,
                      parent=req.headers.get(tracing.TRACEPARENT),
                      attributes={"order.work_key": req.headers.get("Idempotency-Key")}):
        r = c.simulator.handle(service, operation, req.headers.get("Idempotency-Key"),
                               body if isinstance(body, dict) else {})
        tracing.annotate(**{"http.response.status_code": r.status})
    return func.HttpResponse(json.dumps(r.body), status_code=r.status, mimetype="application/json")


def simulated_provider(req: func.HttpRequest) -> func.HttpResponse:
    c = bootstrap.container()
    if not c.settings.simulators_enabled:
        return func.HttpResponse("simulated services are off (SimulatorsEnabled)", status_code=404)
    # An API key as a provider takes it (a bearer token): RemoteServiceKey, the key the app's
    # own calls to the simulators carry. None set: no caller is let in.
    expected = c.settings.remote_service_key
    given = req.headers.get("Authorization", "").removeprefix("Bearer ")
    if expected is None or not hmac.compare_digest(
            given.encode(), expected.get_secret_value().encode()):
        return func.HttpResponse('{"error": {"type": "authentication_error"}}', status_code=401,
                                 mimetype="application/json")
    try:
        body = req.get_json() if req.get_body() else {}
    except (ValueError, RecursionError):
        return func.HttpResponse('{"error": {"message": "body is not JSON"}}', status_code=400,
                                 mimetype="application/json")
    service, call = req.route_params.get("service", ""), req.route_params.get("call", "")
    with tracing.span(f"provider {service} {call}", kind=SpanKind.SERVER,
                      parent=req.headers.get(tracing.TRACEPARENT),
                      attributes={"order.work_key": req.headers.get("Idempotency-Key")}):
        r = c.provider.handle(service, call, req.headers.get("Idempotency-Key"),
                              body if isinstance(body, dict) else {})
        tracing.annotate(**{"http.response.status_code": r.status})
    return func.HttpResponse(json.dumps(r.body), status_code=r.status, mimetype="application/json")
