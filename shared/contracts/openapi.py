"""The operator HTTP API as OpenAPI 3.1, served at GET /api/openapi.json.

Bodies and responses take their schemas from the models the handlers build them with
(shared/handlers/views.py, ResubmitRequest), so the document describes what is answered.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from shared.domain.alerts import AlertKind
from shared.domain.pauses import PauseKind
from shared.domain.senders import RECORD_ID_PATTERN
from shared.domain.state import ProcessState
from shared.handlers.operator_requests import (
    ID_PREFIX_PATTERN,
    MAX_PAGE,
    AckRequest,
    BulkCancelRequest,
    BulkResubmitRequest,
    CancelRequest,
    PauseRequest,
    RedriveRequest,
    ResubmitRequest,
    ResumeRequest,
)
from shared.handlers.views import (
    AlertPage,
    AlertView,
    BulkResult,
    ErrorBody,
    HealthDetails,
    HealthReport,
    OrderPage,
    OrderView,
    Overview,
    PauseList,
    PauseView,
    RedriveList,
    RedrivePreview,
    RedriveView,
    RejectedPage,
)

VERSION = "1.0.0"
_REF = "#/components/schemas/{model}"


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _operator_errors(*codes: int) -> dict[str, Any]:
    """An operator route's: its 401 is the app's (no operator identity), with a JSON body."""
    out = _errors(403, *codes)
    out["503"] = _json(ErrorBody, "Storage did not answer, or refused: the error says which, in "
                                  "words; try again shortly.")
    if 401 in codes:
        out["401"] = _json(ErrorBody, "No operator identity came with the request (sign in), "
                                      "or it could not be read: the error says which.")
    return out


def _errors(*codes: int) -> dict[str, Any]:
    what = {
        400: "The request is wrong: the error says how.",
        401: "No key, or a key without the rights this route needs. The body is empty.",
        403: "Signed in, without the app role this route needs (the error names it); or a "
             "change asked by another site's page (its Origin another site's).",
        404: "No such order (or alert).",
        409: "Not now: the order's state does not allow it, or its record is a newer "
             "release's: the error says why.",
        415: "The body is not sent as JSON (Content-Type application/json): every POST "
             "takes a JSON body, {} at least.",
        500: "A stored record this version cannot read: the error names it.",
    }
    out: dict[str, Any] = {}
    for code in codes:
        out[str(code)] = ({"description": what[code]} if code == 401
                          else _json(ErrorBody, what[code]))
    return out


_ORDER_ID = {"name": "order_id", "in": "path", "required": True,
             "schema": {"type": "string", "pattern": RECORD_ID_PATTERN}}
_PAUSE_TARGET = [{"name": "kind", "in": "path", "required": True,
                  "schema": {"type": "string", "enum": [k.value for k in PauseKind]}},
                 {"name": "name", "in": "path", "required": True,
                  "description": "The service's or the workflow's name (GET /pauses lists them).",
                  "schema": {"type": "string", "minLength": 1, "maxLength": 80}}]
_REDRIVE_ID = {"name": "redrive_id", "in": "path", "required": True,
               "description": "The re-drive's id (GET /redrives lists them).",
               "schema": {"type": "string", "pattern": "^rd-[0-9]{13}-[0-9a-f]{8}$"}}
_LIMIT = {"name": "limit", "in": "query", "required": False,
          "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 50}}
_CONTINUATION = {"name": "continuation", "in": "query", "required": False,
                 "description": "The continuation of the previous page, as it was given.",
                 "schema": {"type": "string"}}


@cache
def openapi_document() -> dict[str, Any]:
    _, defs = models_json_schema(
        [(m, "serialization") for m in (OrderView, OrderPage, RejectedPage, Overview,
                                        HealthReport, HealthDetails, AlertPage, AlertView,
                                        BulkResult, ErrorBody, PauseList, PauseView,
                                        RedriveList, RedriveView, RedrivePreview)]
        + [(m, "validation") for m in (ResubmitRequest, AckRequest, BulkResubmitRequest,
                                       CancelRequest, BulkCancelRequest, PauseRequest,
                                       ResumeRequest, RedriveRequest)],
        ref_template=_REF)
    function_key: list[dict[str, list[str]]] = [{"functionKey": []}, {"functionKeyQuery": []}]
    operator: list[dict[str, list[str]]] = [{"operator": []}]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Order pipeline operator API",
            "version": VERSION,
            "description": "Look orders up, list them, resubmit a failed one, see what is in "
                           "flight, failed or rejected, and check health. An operator signs in "
                           "(App Service Authentication, Entra ID) and needs the app role "
                           "Orders.Read to read, Orders.Resubmit to resubmit, Orders.Cancel "
                           "to cancel, Orders.Pause to pause; no key opens "
                           "those routes. Health and this document take a function key "
                           "(machine callers).",
        },
        "servers": [{"url": "/api"}],
        "security": operator,
        "paths": {
            "/orders": {"get": {
                "operationId": "listOrders",
                "summary": "A page of orders, optionally of one state.",
                "parameters": [
                    {"name": "state", "in": "query", "required": False,
                     "schema": {"type": "string", "enum": [p.value for p in ProcessState]}},
                    {"name": "prefix", "in": "query", "required": False,
                     "description": "Only orders whose id starts with this.",
                     "schema": {"type": "string", "pattern": ID_PREFIX_PATTERN}},
                    {"name": "customer", "in": "query", "required": False,
                     "description": "Only this customer's orders (the stored order's "
                                    "CustomerId): at most 50, one page, no continuation; truncated "
                                    "says more may exist.",
                     "schema": {"type": "string", "minLength": 1, "maxLength": 128}},
                    _LIMIT, _CONTINUATION],
                "responses": {"200": _json(OrderPage, "A page of orders."),
                              **_operator_errors(400, 401)},
            }},
            "/orders/{order_id}": {"get": {
                "operationId": "getOrder",
                "summary": "One order: its state record, steps, history and the order itself.",
                "parameters": [_ORDER_ID],
                "responses": {"200": _json(OrderView, "The order."),
                              **_operator_errors(400, 401, 404, 409, 500)},
            }},
            "/orders/{order_id}/resubmit": {"post": {
                "operationId": "resubmitOrder",
                "summary": "Start a failed order again (its completed steps are not redone).",
                "description": "Only an order in Error whose compensation is over. After a "
                               "failed compensation, only with force, once the services have "
                               "been checked.",
                "parameters": [_ORDER_ID],
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref(ResubmitRequest)}}},
                "responses": {"202": _json(OrderView, "Resubmitted: the order as it is now."),
                              **_operator_errors(400, 401, 404, 409, 415, 500)},
            }},
            "/orders/{order_id}/resume": {"post": {
                "operationId": "resumeOrder",
                "summary": "Go on with a parked order (a step that needed a person) from that "
                           "step, asked again under the same key, once the person has acted. "
                           "Needs Orders.Resubmit.",
                "description": "An order that is not Parked: 409, saying why (a failed one is "
                               "resubmitted).",
                "parameters": [_ORDER_ID],
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref(ResumeRequest)}}},
                "responses": {"202": _json(OrderView, "Resumed: the order as it is now."),
                              **_operator_errors(400, 401, 404, 409, 415, 500)},
            }},
            "/orders/{order_id}/cancel": {"post": {
                "operationId": "cancelOrder",
                "summary": "Stop an order still running (Pending or Processing): nothing more "
                           "is sent for it, and its done work is undone, latest first, each "
                           "once. It ends Cancelled, with the operator and reason on its "
                           "timeline. Needs Orders.Cancel.",
                "description": "A Processed order is not cancelled (undoing a delivered order "
                               "is a business process), nor a failed or cancelled one: 409, "
                               "saying why.",
                "parameters": [_ORDER_ID],
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref(CancelRequest)}}},
                "responses": {"202": _json(OrderView, "Cancelled: the order as it is now."),
                              **_operator_errors(400, 401, 404, 409, 415, 500)},
            }},
            "/alerts": {"get": {
                "operationId": "listAlerts",
                "summary": "Operator alerts of the last 7 days, newest first; "
                           "?acknowledged=false for those nobody has acknowledged yet, true "
                           "for those someone has (with who and when).",
                "parameters": [
                    {"name": "acknowledged", "in": "query", "required": False,
                     "schema": {"type": "string", "enum": ["true", "false"]}},
                    {"name": "kind", "in": "query", "required": False,
                     "schema": {"type": "string", "enum": [k.value for k in AlertKind]}},
                    _LIMIT],
                "responses": {"200": _json(AlertPage, "The alerts."),
                              **_operator_errors(400, 401)},
            }},
            "/alerts/{alert_id}/ack": {"post": {
                "operationId": "acknowledgeAlert",
                "summary": "Acknowledge an alert: who (the signed-in operator) and when are "
                           "kept on it, with the note if one is given. Needs Orders.Resubmit.",
                "parameters": [{"name": "alert_id", "in": "path", "required": True,
                                "schema": {"type": "string",
                                           "pattern": (r"^\d{8}\.\d{13}-"
                                                       r"(?:[0-9a-f]{12}|[0-9a-f]{8})$")}}],
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref(AckRequest)}}},
                "responses": {"200": _json(AlertView, "Acknowledged: the alert as it is now."),
                              **_operator_errors(400, 401, 404, 409, 415)},
            }},
            "/resubmissions": {"post": {
                "operationId": "resubmitOrders",
                "summary": "Resubmit the failed orders a filter picks, a bounded batch at a "
                           "time, each recorded with the operator as a single resubmit is; "
                           "by default a dry run that says what each would come to.",
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref(BulkResubmitRequest)}}},
                "responses": {"200": _json(BulkResult, "A dry run: what would be done."),
                              "202": _json(BulkResult, "Done: each order's outcome."),
                              **_operator_errors(400, 401, 415)},
            }},
            "/cancellations": {"post": {
                "operationId": "cancelOrders",
                "summary": "Cancel the running orders a filter picks, a bounded batch at a "
                           "time, each as a single cancel is; by default a dry run that says "
                           "what each would come to. Needs Orders.Cancel.",
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref(BulkCancelRequest)}}},
                "responses": {"200": _json(BulkResult, "A dry run: what would be done."),
                              "202": _json(BulkResult, "Done: each order's outcome."),
                              **_operator_errors(400, 401, 415)},
            }},
            "/pauses": {"get": {
                "operationId": "listPauses",
                "summary": "Every service and workflow of the app, the paused first, with who "
                           "paused each, when and why.",
                "responses": {"200": _json(PauseList, "The pauses."),
                              **_operator_errors(401)},
            }},
            "/pauses/{kind}/{name}": {"post": {
                "operationId": "pause",
                "summary": "Pause a service (its Agent calls nothing; its steps wait, their "
                           "time stopped, no failure counted) or a workflow's intake (its new "
                           "orders are taken and wait, Pending). Needs Orders.Pause.",
                "description": "Not the circuit breaker (automatic, per instance, seconds): a "
                               "pause holds on every instance within 5 s and lasts until "
                               "resumed. Paused already: 409.",
                "parameters": _PAUSE_TARGET,
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref(PauseRequest)}}},
                "responses": {"200": _json(PauseView, "Paused: the pause as it is now."),
                              **_operator_errors(400, 401, 404, 409, 415)},
            }},
            "/pauses/{kind}/{name}/resume": {"post": {
                "operationId": "resume",
                "summary": "Resume a paused service or workflow: its waiting steps are sent "
                           "again (the same attempt and key) and its waiting orders start, "
                           "the longest held first, from the first Supervisor tick once every "
                           "instance knows (5 s). Needs Orders.Pause.",
                "parameters": _PAUSE_TARGET,
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref(PauseRequest)}}},
                "responses": {"200": _json(PauseView, "Resumed: the pause as it is now."),
                              **_operator_errors(400, 401, 404, 409, 415)},
            }},
            "/redrives": {
                "get": {
                    "operationId": "listRedrives",
                    "summary": "The newest re-drives, with their progress.",
                    "responses": {"200": _json(RedriveList, "The re-drives."),
                                  **_operator_errors(401)},
                },
                "post": {
                    "operationId": "redrive",
                    "summary": "Resubmit every failed order a selection picks, in the "
                               "background, at a pace (by default the slowest limit among the "
                               "workflow's services); by default a dry run that counts what it "
                               "would pick. Needs Orders.Resubmit.",
                    "description": "Survives the instance running it: a page's picks are on "
                                   "its record before any is resubmitted, and each order is "
                                   "resubmitted once. Orders that fail after it starts are not "
                                   "its own.",
                    "requestBody": {"required": True, "content": {
                        "application/json": {"schema": _ref(RedriveRequest)}}},
                    "responses": {"200": _json(RedrivePreview, "A dry run: what it would "
                                                               "pick."),
                                  "202": _json(RedriveView, "Started: runs in the "
                                                            "background."),
                                  **_operator_errors(400, 401, 404, 409, 415)},
                },
            },
            "/redrives/{redrive_id}": {"get": {
                "operationId": "getRedrive",
                "summary": "One re-drive's progress: resubmitted, refused (the latest, with "
                           "why), in hand, failed orders read.",
                "parameters": [_REDRIVE_ID],
                "responses": {"200": _json(RedriveView, "The re-drive."),
                              **_operator_errors(401, 404)},
            }},
            "/redrives/{redrive_id}/{action}": {"post": {
                "operationId": "changeRedrive",
                "summary": "Pause a running re-drive (it stops within about a second), resume "
                           "a paused one, or cancel it (what it resubmitted runs on; the rest "
                           "stay failed). Needs Orders.Resubmit.",
                "parameters": [_REDRIVE_ID, {
                    "name": "action", "in": "path", "required": True,
                    "schema": {"type": "string", "enum": ["pause", "resume", "cancel"]}}],
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": _ref(PauseRequest)}}},
                "responses": {"200": _json(RedriveView, "The re-drive as it is now."),
                              **_operator_errors(400, 401, 404, 409, 415)},
            }},
            "/rejected": {"get": {
                "operationId": "listRejected",
                "summary": "Intake that was refused, with the reason, newest sent first.",
                "parameters": [_LIMIT, _CONTINUATION],
                "responses": {"200": _json(RejectedPage, "A page of rejected messages."),
                              **_operator_errors(400, 401)},
            }},
            "/overview": {"get": {
                "operationId": "overview",
                "summary": "Counts by state, in-flight (most overdue first), failed, "
                           "compensation failed, recent alerts and rejections.",
                "responses": {"200": _json(Overview, "What the console shows."),
                              **_operator_errors(401)},
            }},
            "/health": {"get": {
                "operationId": "health",
                "summary": "Whether storage answers; within 5 s even when it does not.",
                "description": "For monitors: the verdict and each check's, never why (an "
                               "error's text can name hosts and accounts). An operator reads "
                               "/health/details.",
                "security": function_key,
                "responses": {"200": _json(HealthReport, "Healthy."),
                              "503": _json(HealthReport, "A check failed: it says which."),
                              **_errors(401)},
            }},
            "/health/details": {"get": {
                "operationId": "healthDetails",
                "summary": "Health as an operator reads it: why a check failed, each remote "
                           "service's circuit breaker, the last Supervisor tick, the backlog "
                           "of each queue the app reads and of its poison queue.",
                "responses": {**_operator_errors(401),
                              "200": _json(HealthDetails, "Storage answers."),
                              "503": _json(HealthDetails, "A check failed: it says why.")},
            }},
            "/console": {"get": {
                "operationId": "console",
                "summary": "The operator's console, a web page (it holds no data: it reads "
                           "the routes above as the signed-in operator).",
                "security": [],
                "parameters": [{"name": "asset", "in": "query", "required": False,
                                "description": "One of the page's own files.",
                                "schema": {"type": "string",
                                           "enum": ["console.js", "console.css"]}}],
                "responses": {"200": {"description": "The page, or the file asked for.",
                                      "content": {t: {"schema": {"type": "string"}} for t in
                                                  ("text/html", "text/javascript", "text/css")}},
                              "404": {"description": "No such file of the page."}},
            }},
            "/openapi.json": {"get": {
                "operationId": "openapi",
                "summary": "This document.",
                "security": function_key,
                "responses": {"200": {"description": "OpenAPI 3.1.",
                                      "content": {"application/json": {
                                          "schema": {"type": "object"}}}},
                              **_errors(401)},
            }},
        },
        "components": {
            "schemas": defs["$defs"],
            "securitySchemes": {
                "functionKey": {"type": "apiKey", "in": "header", "name": "x-functions-key",
                                "description": "A function key, or a host key."},
                "functionKeyQuery": {"type": "apiKey", "in": "query", "name": "code",
                                     "description": "The same key as a query parameter."},
                "operator": {"type": "apiKey", "in": "header", "name": "X-MS-CLIENT-PRINCIPAL",
                             "description": "The signed-in operator, as App Service "
                                            "Authentication hands it to the app after an Entra "
                                            "ID sign-in (a bearer token or the session cookie); "
                                            "the platform strips one a client sends. See "
                                            "docs/security-operators.md."},
            },
        },
    }
