"""The operator's HTTP routes: orders, resubmit, re-drives, pauses, alerts, rejected intake,
the overview, the console and health.

The operator routes are anonymous to the host on purpose: the operator is a person (or a tool)
with an Entra ID identity, not a key holder. App Service Authentication signs them in and each
route names the app role it needs (web.operator_route), so a function or host key opens none of
them. Only the machine routes (health, openapi) keep a function key.
"""

from __future__ import annotations

from pathlib import Path

import azure.functions as func
from pydantic import BaseModel

from shared import bootstrap
from shared.contracts.openapi import openapi_document
from shared.functions.web import ANSWER_HEADERS, Reply, json_answer, limit_of, operator_route
from shared.handlers.operator import Operator
from shared.handlers.operator_requests import (
    AckRequest,
    BulkCancelRequest,
    BulkResubmitRequest,
    CancelRequest,
    PauseRequest,
    RedriveRequest,
    ResubmitRequest,
    ResumeRequest,
)
from shared.handlers.principal import (
    CANCEL_ROLE,
    PAUSE_ROLE,
    READ_ROLE,
    RESUBMIT_ROLE,
    Principal,
)

CONSOLE = Path(__file__).parent.parent / "console"
# What the console page loads besides itself, by name (?asset=): its script and its styles live
# in files of their own so the page's policy can forbid inline script and style altogether.
CONSOLE_ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}
# The page runs only this app's own files and talks only to this app; nothing may frame it,
# rebase its relative addresses or be the target of a form it holds (its one form is sent by
# its script, as JSON).
CONSOLE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; "
                  "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                  "form-action 'none'; frame-ancestors 'none'")

_ACKNOWLEDGED = {"true": True, "false": False}
REDRIVE_ACTIONS = ("pause", "resume", "cancel")


def operator_api() -> func.Blueprint:
    bp = func.Blueprint()  # type: ignore[no-untyped-call]

    @operator_route(bp, "get_order", "orders/{order_id}", "GET", READ_ROLE)
    def get_order(op: Operator, req: func.HttpRequest, _: Principal) -> BaseModel | Reply:
        return op.get(req.route_params.get("order_id", ""))

    @operator_route(bp, "list_orders", "orders", "GET", READ_ROLE)
    def list_orders(op: Operator, req: func.HttpRequest, _: Principal) -> BaseModel | Reply:
        # A state present but empty is a bad state, not "any".
        return op.orders(req.params.get("state"), limit_of(req), req.params.get("continuation"),
                         prefix=req.params.get("prefix"), customer=req.params.get("customer"))

    @operator_route(bp, "resubmit_order", "orders/{order_id}/resubmit", "POST", RESUBMIT_ROLE)
    def resubmit_order(op: Operator, req: func.HttpRequest, who: Principal) -> BaseModel | Reply:
        body = ResubmitRequest.from_body(req.get_body())
        return Reply(op.resubmit(req.route_params.get("order_id", ""), body.reason, body.force,
                                 by=who.label()), 202)

    # A dry run writes nothing, but it is the rehearsal of a resubmit: the same role.
    @operator_route(bp, "resubmit_orders", "resubmissions", "POST", RESUBMIT_ROLE)
    def resubmit_orders(op: Operator, req: func.HttpRequest, who: Principal) -> BaseModel | Reply:
        ask = BulkResubmitRequest.from_body(req.get_body())
        return Reply(op.resubmit_many(ask, by=who.label()), 200 if ask.dry_run else 202)

    # Going on with a parked order, as resubmitting a failed one is: the same role.
    @operator_route(bp, "resume_order", "orders/{order_id}/resume", "POST", RESUBMIT_ROLE)
    def resume_order(op: Operator, req: func.HttpRequest, who: Principal) -> BaseModel | Reply:
        body = ResumeRequest.from_body(req.get_body())
        return Reply(op.resume(req.route_params.get("order_id", ""), body.reason,
                               by=who.label()), 202)

    @operator_route(bp, "cancel_order", "orders/{order_id}/cancel", "POST", CANCEL_ROLE)
    def cancel_order(op: Operator, req: func.HttpRequest, who: Principal) -> BaseModel | Reply:
        body = CancelRequest.from_body(req.get_body())
        return Reply(op.cancel(req.route_params.get("order_id", ""), body.reason,
                               by=who.label()), 202)

    @operator_route(bp, "cancel_orders", "cancellations", "POST", CANCEL_ROLE)
    def cancel_orders(op: Operator, req: func.HttpRequest, who: Principal) -> BaseModel | Reply:
        ask = BulkCancelRequest.from_body(req.get_body())
        return Reply(op.cancel_many(ask, by=who.label()), 200 if ask.dry_run else 202)

    @operator_route(bp, "list_pauses", "pauses", "GET", READ_ROLE)
    def list_pauses(op: Operator, req: func.HttpRequest, _: Principal) -> BaseModel | Reply:
        return op.pauses.list()

    @operator_route(bp, "pause", "pauses/{kind}/{name}", "POST", PAUSE_ROLE)
    def pause(op: Operator, req: func.HttpRequest, who: Principal) -> BaseModel | Reply:
        body = PauseRequest.from_body(req.get_body(), required=True)
        return op.pauses.pause(req.route_params.get("kind", ""), req.route_params.get("name", ""),
                               body.reason, by=who.label())

    @operator_route(bp, "resume", "pauses/{kind}/{name}/resume", "POST", PAUSE_ROLE)
    def resume(op: Operator, req: func.HttpRequest, who: Principal) -> BaseModel | Reply:
        body = PauseRequest.from_body(req.get_body(), required=False)
        return op.pauses.resume(req.route_params.get("kind", ""),
                                req.route_params.get("name", ""), body.reason, by=who.label())

    @operator_route(bp, "list_redrives", "redrives", "GET", READ_ROLE)
    def list_redrives(op: Operator, req: func.HttpRequest, _: Principal) -> BaseModel | Reply:
        return bootstrap.container().redrives.list()

    # Re-driving is resubmitting in the background: the same role, dry run included.
    @operator_route(bp, "start_redrive", "redrives", "POST", RESUBMIT_ROLE)
    def start_redrive(op: Operator, req: func.HttpRequest, who: Principal) -> BaseModel | Reply:
        ask = RedriveRequest.from_body(req.get_body())
        control = bootstrap.container().redrives
        if ask.dry_run:
            return control.preview(ask)
        return Reply(control.start(ask, by=who.label()), 202)

    @operator_route(bp, "get_redrive", "redrives/{redrive_id}", "GET", READ_ROLE)
    def get_redrive(op: Operator, req: func.HttpRequest, _: Principal) -> BaseModel | Reply:
        return bootstrap.container().redrives.get(req.route_params.get("redrive_id", ""))

    @operator_route(bp, "change_redrive", "redrives/{redrive_id}/{action}", "POST",
                    RESUBMIT_ROLE)
    def change_redrive(op: Operator, req: func.HttpRequest, who: Principal
                       ) -> BaseModel | Reply:
        action = req.route_params.get("action", "")
        if action not in REDRIVE_ACTIONS:
            raise ValueError(f"{action[:20]!r}: a re-drive is paused, resumed or cancelled "
                             "(…/pause, …/resume, …/cancel)")
        body = PauseRequest.from_body(req.get_body(), required=False)
        control = bootstrap.container().redrives
        change = {"pause": control.pause, "resume": control.resume,
                  "cancel": control.cancel}[action]
        return change(req.route_params.get("redrive_id", ""), body.reason, who.label())

    @operator_route(bp, "list_rejected", "rejected", "GET", READ_ROLE)
    def list_rejected(op: Operator, req: func.HttpRequest, _: Principal) -> BaseModel | Reply:
        return op.rejected(limit_of(req), req.params.get("continuation"))

    @operator_route(bp, "list_alerts", "alerts", "GET", READ_ROLE)
    def list_alerts(op: Operator, req: func.HttpRequest, _: Principal) -> BaseModel | Reply:
        which = req.params.get("acknowledged")
        if which is not None and which not in _ACKNOWLEDGED:
            raise ValueError("acknowledged must be true or false (or left out for both)")
        return op.alerts(limit_of(req),
                         acknowledged=None if which is None else _ACKNOWLEDGED[which],
                         kind=req.params.get("kind"))

    # Acknowledging acts on what operators share, as resubmitting does: the same role (a reader
    # only looks). A role of its own would need the app registration's roles changed everywhere
    # for a lesser act than a resubmit.
    @operator_route(bp, "ack_alert", "alerts/{alert_id}/ack", "POST", RESUBMIT_ROLE)
    def ack_alert(op: Operator, req: func.HttpRequest, who: Principal) -> BaseModel | Reply:
        body = AckRequest.from_body(req.get_body())
        return op.acknowledge(req.route_params.get("alert_id", ""), who.label(), body.note)

    @operator_route(bp, "overview", "overview", "GET", READ_ROLE)
    def overview(op: Operator, req: func.HttpRequest, _: Principal) -> BaseModel | Reply:
        return op.overview()

    @operator_route(bp, "health_details", "health/details", "GET", READ_ROLE)
    def health_details(op: Operator, req: func.HttpRequest, _: Principal) -> BaseModel | Reply:
        report = op.health(detailed=True)
        return Reply(report, 200 if report.status == "ok" else 503)

    @bp.function_name("console")
    @bp.route(route="console", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def console(req: func.HttpRequest) -> func.HttpResponse:
        # The page itself holds no data: every figure on it comes from a route above, with the
        # operator's identity (the platform's session cookie in Azure).
        asset = req.params.get("asset")
        if asset is None:
            body, mimetype = (CONSOLE / "console.html").read_bytes(), "text/html"
        elif asset in CONSOLE_ASSETS:
            body, mimetype = (CONSOLE / asset).read_bytes(), CONSOLE_ASSETS[asset]
        else:
            return func.HttpResponse(b"", status_code=404, headers=ANSWER_HEADERS)
        return func.HttpResponse(body, mimetype=mimetype, headers={
            "Content-Security-Policy": CONSOLE_POLICY, **ANSWER_HEADERS,
            "Referrer-Policy": "no-referrer"})

    @bp.function_name("openapi")
    @bp.route(route="openapi.json", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
    def openapi(req: func.HttpRequest) -> func.HttpResponse:
        return json_answer(openapi_document())

    @bp.function_name("health")
    @bp.route(route="health", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
    def health(req: func.HttpRequest) -> func.HttpResponse:
        # A machine route: the verdict and each check's, never why (the operator's route says).
        report = bootstrap.container().operator.health()
        return json_answer(report.model_dump(mode="json"), 200 if report.status == "ok" else 503)

    return bp
