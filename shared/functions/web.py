"""What every HTTP route shares: JSON answers, one table from exceptions to statuses, the
operator's identity and role, and the check that a change comes from the app's own page."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import azure.functions as func
from azure.core.exceptions import AzureError
from pydantic import BaseModel

from shared import bootstrap
from shared.adapters.alerts import AckRefused, AlertNotFound
from shared.adapters.state_entity import CorruptRecord, NewerRecord
from shared.handlers.failures import describe, without_python
from shared.handlers.operator import Operator
from shared.handlers.operator_requests import (
    MAX_PAGE,
    CancelRefused,
    OrderNotFound,
    ResubmitRefused,
    ResumeRefused,
)
from shared.handlers.pausing import PauseRefused, UnknownTarget
from shared.handlers.principal import Forbidden, Principal, Unauthenticated, authorise
from shared.handlers.redriving import RedriveRefused, UnknownRedrive

# On every answer of the API and the console: nothing of an operator's data kept in a cache on
# the way or in the browser, a JSON body never taken for something else (a script, a page),
# and the browser told to come back over https only (it heeds that only over https).
ANSWER_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
                  "Strict-Transport-Security": "max-age=31536000; includeSubDomains"}

log = logging.getLogger(__name__)


def json_answer(body: Any, status: int = 200) -> func.HttpResponse:
    return func.HttpResponse(json.dumps(body, default=str), status_code=status,
                             mimetype="application/json", headers=ANSWER_HEADERS)


def error(status: int, message: str) -> func.HttpResponse:
    return json_answer({"error": message}, status)


@dataclass(frozen=True)
class Reply:
    """A route's answer with a status other than 200."""
    body: BaseModel
    status: int


def _plain(body: BaseModel, status: int = 200) -> tuple[Any, int]:
    return body.model_dump(mode="json"), status


def _unreadable(e: CorruptRecord) -> tuple[int, str]:
    if isinstance(e, NewerRecord):  # not broken: the next release's, mid-rollout
        return 409, (f"the state record of order {e.order_id} was written by a newer release "
                     "of the app: its own operator API reads it")
    # Our data, not the caller's fault: say which record and what is wrong with it.
    return 500, (f"the state record of order {e.order_id} is unreadable by this version of "
                 f"the app: {without_python(e.reason)}")


def _storage(e: AzureError) -> tuple[int, str]:
    log.warning("operator route: storage failed", exc_info=True)
    return 503, f"storage {describe(e)}; try again shortly"


# What an operator route's exception answers, the first class that matches: the caller's input
# (400), what is not there (404), what the order's or alert's state refuses (409), storage.
ERRORS: tuple[tuple[type[Exception], Callable[[Any], tuple[int, str]]], ...] = (
    (Unauthenticated, lambda e: (401, str(e))),
    (Forbidden, lambda e: (403, str(e))),
    (OrderNotFound, lambda e: (404, f"no order {str(e)!r}")),
    (AlertNotFound, lambda e: (404, f"no alert {str(e)!r} (alerts are kept as long as the "
                                    "table's rows: the listing shows the last 7 days)")),
    (ResubmitRefused, lambda e: (409, str(e))),
    (CancelRefused, lambda e: (409, str(e))),
    (ResumeRefused, lambda e: (409, str(e))),
    (AckRefused, lambda e: (409, str(e))),
    (PauseRefused, lambda e: (409, str(e))),
    (UnknownTarget, lambda e: (404, str(e))),
    (UnknownRedrive, lambda e: (404, str(e))),
    (RedriveRefused, lambda e: (409, str(e))),
    (CorruptRecord, _unreadable),
    (ValueError, lambda e: (400, str(e))),  # a bad id, body, filter, limit or token
    (AzureError, _storage),  # storage down or refusing: said, not a bare 500
)


def _answer_to(e: Exception) -> func.HttpResponse | None:
    for kind, answer in ERRORS:
        if isinstance(e, kind):
            return error(*answer(e))
    return None


def _cross_site(req: func.HttpRequest) -> func.HttpResponse | None:
    """A change asked for by another site's page in the operator's browser, which carries the
    platform's session cookie (cross-site request forgery). Browsers say where a request comes
    from (Origin on every POST, Sec-Fetch-Site), and a page elsewhere can send a POST only as a
    form or plain text, with no body or one, without the app's leave (CORS): every POST of the
    console and the CLI is JSON, so every POST must be."""
    if (req.headers.get("Sec-Fetch-Site") or "").lower() == "cross-site":
        return error(403, "a change asked for from another site's page is not accepted")
    origin = req.headers.get("Origin")
    if origin is not None and _host_of(origin) != (req.headers.get("Host") or "").lower():
        return error(403, "a change asked for from another site's page is not accepted "
                          f"(Origin {origin[:100]!r})")
    kind = (req.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if kind != "application/json":
        return error(415, "send the body as JSON (Content-Type: application/json), not "
                          f"{kind[:60] or 'none'}")
    return None


def _host_of(origin: str) -> str | None:
    """The host and port an Origin names ("null", or no URL: None)."""
    try:
        return urlsplit(origin).netloc.lower() or None
    except ValueError:
        return None


OperatorRoute = Callable[[Operator, func.HttpRequest, Principal], BaseModel | Reply]


def operator_route(bp: func.Blueprint, name: str, route: str, method: str, role: str
                   ) -> Callable[[OperatorRoute], OperatorRoute]:
    """Register ``name`` as an operator route: anonymous to the host (an operator is a person
    with an identity, not a key holder), the caller's identity with ``role`` checked first
    (shared/handlers/principal.py), then that a change comes from the app's own page. The
    function takes the operator service, the request and
    the caller, and returns the answer (a view, or a Reply of one with its status); its
    exceptions answer by ERRORS."""
    def register(handle: OperatorRoute) -> OperatorRoute:
        def serve(req: func.HttpRequest) -> func.HttpResponse:
            try:
                c = bootstrap.container()
                principal = authorise(req.headers, role, os.environ,
                                      c.settings.operator_development_roles)
                if req.method == "POST" and (refused := _cross_site(req)) is not None:
                    return refused
                body = handle(c.operator, req, principal)
            except Exception as e:
                if (answer := _answer_to(e)) is None:
                    raise
                return answer
            return json_answer(*_plain(body.body, body.status)) if isinstance(body, Reply) \
                else json_answer(*_plain(body))

        serve.__name__ = name
        bp.function_name(name)(bp.route(route=route, methods=[method],
                                        auth_level=func.AuthLevel.ANONYMOUS)(serve))
        return handle
    return register


def limit_of(req: func.HttpRequest) -> int:
    text = req.params.get("limit", "50")
    # ASCII digits, a few: str.isdigit() takes "²" (int() refuses it, in Python's words) and
    # other scripts' digits, and int() refuses past 4,300 of them.
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise ValueError(f"limit must be a whole number from 1 to {MAX_PAGE}, not {text[:20]!r}")
    return int(text)
