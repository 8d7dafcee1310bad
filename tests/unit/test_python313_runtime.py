"""Python 3.13 and later run the app through azure-functions-runtime, the worker's execution
engine from 3.13 on: the app indexes under its loader as it does under the local host. It runs in
the 3.13 job of `make test` (the package needs 3.13); invocation needs the worker's gRPC protos,
which the package does not ship, so it is left to the local host's tests."""

from __future__ import annotations

import os
import sys

import pytest

from tests.conftest import ROOT

loader = pytest.importorskip("azure_functions_runtime.loader",
                             reason="azure-functions-runtime runs on Python 3.13 and later")


def test_the_app_indexes_under_the_313_runtime_as_under_the_local_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setenv("AzureWebJobsStorage", "UseDevelopmentStorage=true")
    monkeypatch.setenv("SimulatorsEnabled", "false")  # no fault-injecting route indexed
    monkeypatch.setenv("SimulatorBaseUrl", "https://services.example/api/sim")
    sys.modules.pop("function_app", None)
    indexed = loader.index_function_app(os.path.join(ROOT, "function_app.py"))
    names = {f.get_function_name(): f.get_trigger().get_binding_name() for f in indexed}
    from shared.workflows import REGISTRY

    agents = {f"{s}_agent": "queueTrigger" for s in REGISTRY.services}
    core = {"intake": "serviceBusTrigger", "scheduler_commands": "queueTrigger",
            "scheduler_replies": "queueTrigger", "supervisor": "timerTrigger", **agents,
            "get_order": "httpTrigger", "resubmit_order": "httpTrigger"}
    assert {n: names.get(n) for n in core} == core
    assert "simulated_service" not in names and "simulated_provider" not in names
    assert set(names.values()) <= {"serviceBusTrigger", "queueTrigger", "timerTrigger",
                                   "httpTrigger"}
