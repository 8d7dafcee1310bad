"""GET /api/openapi.json describes the operator API, and the API keeps to it: schemathesis
generates requests from the document (valid and invalid) against the local host over real
orders in Azurite; no answer may be a 5xx or differ from the document."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import function_app
from localrun.host.index import functions_of
from shared.contracts.openapi import openapi_document
from shared.handlers.principal import READ_ROLE, RESUBMIT_ROLE
from tests.integration.conftest import RunningHost
from tests.integration.test_operator_api import (
    accept,
    compensation_failed,
    failed_and_compensated,
    signed_in,
)

OPERATOR = signed_in(READ_ROLE, RESUBMIT_ROLE)["X-MS-CLIENT-PRINCIPAL"]
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
# Every HTTP route but the simulated services (a stand-in for remote services, not the API).
ROUTES = {f.name for f in functions_of(function_app.app)
          if any(b["type"] == "httpTrigger" for b in f.bindings)} - {"simulated_service",
                                                                      "simulated_provider"}


@pytest.fixture
def h(run_host: Any) -> RunningHost:
    h: RunningHost = run_host(only=ROUTES, LOCALRUN_FUNCTION_KEY="fn-key",
                              LOCALRUN_MASTER_KEY="master-key")
    failed_and_compensated(h, "f-1")
    compensation_failed(h, "f-2")
    accept("o-1")
    return h


def test_every_route_is_described(h: RunningHost) -> None:
    r = httpx.get(f"http://127.0.0.1:{h.port}/api/openapi.json", params={"code": "fn-key"},
                  timeout=10)
    assert r.status_code == 200
    doc = r.json()
    assert doc == openapi_document() and doc["openapi"].startswith("3.1")
    described = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    routes = set()
    for f in functions_of(function_app.app):
        (t,) = [b for b in f.bindings if b["type"] == "httpTrigger"] or [None]
        if t and f.name in ROUTES:
            routes |= {("/" + t["route"], m.lower()) for m in t["methods"]}
    assert described == routes


def test_schemathesis_finds_no_5xx_and_no_answer_off_the_document(h: RunningHost,
                                                                  tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{h.port}/api"
    run = subprocess.run(
        [str(SCHEMATHESIS), "--config-file", str(Path(__file__).with_name("schemathesis.toml")),
         "run", f"{base}/openapi.json?code=fn-key", "--url", base,
         # An operator with both app roles, and a function key for the machine routes; the
         # checks also send neither and expect a 401.
         "-H", "X-MS-CLIENT-PRINCIPAL: " + OPERATOR,
         "-H", "x-functions-key: fn-key",
         "--checks", "all",
         # The Functions host answers 404, not 405, to a method a route does not take
         # (azure-functions-host#10098); the local host does the same.
         "--exclude-checks", "unsupported_method",
         # One worker: Python 3.11's ast.parse is not safe across threads (cpython#106905),
         # and hypothesis parses each lambda's source to describe it; with 4 workers one
         # clean-clone run failed with "AST constructor recursion depth mismatch".
         "--max-examples", "40", "--seed", "20261122", "--workers", "1",
         "--request-timeout", "10", "--report-dir", str(tmp_path)],
        # Its working files (.schemathesis/) go to the test's folder, not the project's.
        cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "No issues found" in run.stdout or "passed" in run.stdout, run.stdout[-2000:]
