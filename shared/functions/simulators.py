"""The simulated remote services (SimulatorsEnabled): every service's operations in our HTTP
contract, and a provider-shaped API per code service. Fault-injecting: indexed only where asked
for (local runs, demo deployments), and each answers 404 when the setting is off."""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import Any

import azure.functions as func
from opentelemetry.trace import SpanKind

from shared import bootstrap, tracing
from shared.handlers.simulated_service import Response

# "Not JSON" as each kind of service says it.
SERVICE_NOT_JSON = '{"error": "body is not JSON"}'
PROVIDER_NOT_JSON = '{"error": {"message": "body is not JSON"}}'


def simulators() -> func.Blueprint:
    bp = func.Blueprint()  # type: ignore[no-untyped-call]

    # A provider-shaped API per code service (an API key as a bearer token, which it checks
    # itself, as a provider does), for code services to call locally. Its literal route
    # segment takes precedence over simulated_service's parameter.
    @bp.function_name("simulated_provider")
    @bp.route(route="sim/provider/{service}/{call}", methods=["POST"],
              auth_level=func.AuthLevel.ANONYMOUS)
    def simulated_provider(req: func.HttpRequest) -> func.HttpResponse:
        c = bootstrap.container()
        # An API key as a provider takes it (a bearer token): RemoteServiceKey, the key the
        # app's own calls to the simulators carry. None set: no caller is let in.
        expected = c.settings.remote_service_key
        given = req.headers.get("Authorization", "").removeprefix("Bearer ")
        if c.settings.simulators_enabled and (expected is None or not hmac.compare_digest(
                given.encode(), expected.get_secret_value().encode())):
            return func.HttpResponse('{"error": {"type": "authentication_error"}}',
                                     status_code=401, mimetype="application/json")
        service, call = req.route_params.get("service", ""), req.route_params.get("call", "")
        return _serve(req, f"provider {service} {call}", PROVIDER_NOT_JSON,
                      lambda key, body: c.provider.handle(service, call, key, body))

    @bp.function_name("simulated_service")
    @bp.route(route="sim/{service}/{operation}", methods=["POST"],
              auth_level=func.AuthLevel.FUNCTION)
    def simulated_service(req: func.HttpRequest) -> func.HttpResponse:
        c = bootstrap.container()
        service = req.route_params.get("service", "")
        operation = req.route_params.get("operation", "")
        return _serve(req, f"service {service} {operation}", SERVICE_NOT_JSON,
                      lambda key, body: c.simulator.handle(service, operation, key, body))

    return bp


def _serve(req: func.HttpRequest, span: str, not_json: str,
           handle: Callable[[str | None, dict[str, Any]], Response]) -> func.HttpResponse:
    """A simulated service's answer to ``req``; as a real service's, its work joins the
    caller's trace."""
    if not bootstrap.container().settings.simulators_enabled:
        return func.HttpResponse("simulated services are off (SimulatorsEnabled)", status_code=404)
    try:
        body = req.get_json() if req.get_body() else {}
    except (ValueError, RecursionError):  # not JSON, or nested past the parser
        return func.HttpResponse(not_json, status_code=400, mimetype="application/json")
    with tracing.span(span, kind=SpanKind.SERVER, parent=req.headers.get(tracing.TRACEPARENT),
                      attributes={"order.work_key": req.headers.get("Idempotency-Key")}):
        r = handle(req.headers.get("Idempotency-Key"), body if isinstance(body, dict) else {})
        tracing.annotate(**{"http.response.status_code": r.status})
    return func.HttpResponse(json.dumps(r.body), status_code=r.status, mimetype="application/json")
