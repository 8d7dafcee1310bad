"""The worker's thread pool is large enough that no invocation ever waits for a thread.

The Python worker runs every synchronous function on one pool of PYTHON_THREADPOOL_THREAD_COUNT
threads. An Agent holds its thread for up to a step's budget while a service hangs; if the pool
were smaller than what the host may start at once, hung Agents could keep the Scheduler, the
Supervisor and /health waiting. So the pool is sized from the limits the host enforces: host.json
for queue and Service Bus triggers, one for a timer, the Bicep's HTTP concurrency per instance.
"""

from __future__ import annotations

import json
from typing import Any

import function_app
from localrun.host.config import QueueOptions, ServiceBusOptions
from localrun.host.index import functions_of
from shared.workflows import REGISTRY
from tests.conftest import ROOT
from tests.infra.drift import bicep_names, parse

INFRA = ROOT / "infra"


def most_invocations_at_once(host_json: dict[str, Any], http_per_instance: int) -> int:
    queues = QueueOptions.from_host_json(host_json)
    service_bus = ServiceBusOptions.from_host_json(host_json)
    per_trigger = {"queueTrigger": queues.batch_size + queues.new_batch_threshold,
                   "serviceBusTrigger": service_bus.max_concurrent_calls,
                   "timerTrigger": 1}
    kinds = [f.trigger["type"] for f in functions_of(function_app.app)]
    unknown = set(kinds) - set(per_trigger) - {"httpTrigger"}
    assert not unknown, f"say how many invocations a {unknown} trigger may run at once"
    # HTTP functions share the instance's HTTP concurrency between them.
    return sum(per_trigger[k] for k in kinds if k != "httpTrigger") + (
        http_per_instance if "httpTrigger" in kinds else 0)


def test_the_deployed_pool_holds_every_invocation_the_host_may_start() -> None:
    host_json = json.loads((ROOT / "host.json").read_text())
    http = parse(INFRA / "main.bicep")["parameters"]["httpPerInstanceConcurrency"]["default"]
    pool = int(bicep_names(INFRA).app_settings["PYTHON_THREADPOOL_THREAD_COUNT"])
    # The Scheduler's two queue functions and one Agent per service the workflows call.
    queue_functions = 2 + len(REGISTRY.services)
    # Two timers: the Supervisor's and the re-drive runner's.
    assert most_invocations_at_once(host_json, http) == queue_functions * 24 + 16 + 2 + 16
    assert pool >= most_invocations_at_once(host_json, http)


def test_local_runs_use_the_deployed_pool_size() -> None:
    template = json.loads((ROOT / "local.settings.template.json").read_text())["Values"]
    deployed = bicep_names(INFRA).app_settings["PYTHON_THREADPOOL_THREAD_COUNT"]
    assert template["PYTHON_THREADPOOL_THREAD_COUNT"] == deployed


def test_a_larger_batch_in_host_json_would_outgrow_the_pool() -> None:
    host_json = json.loads((ROOT / "host.json").read_text())
    host_json["extensions"]["queues"]["batchSize"] = 32
    pool = int(bicep_names(INFRA).app_settings["PYTHON_THREADPOOL_THREAD_COUNT"])
    assert most_invocations_at_once(host_json, 16) > pool


def test_a_service_added_to_a_workflow_grows_the_pool_with_no_edit_but_its_declaration() -> None:
    """The pool is derived (shared/contracts/services.py): the Bicep and the local template take
    it from the contracts, which the drift check holds to the registry."""
    from datetime import timedelta

    from shared.contracts.services import thread_pool
    from shared.domain.workflow import Registry, Step, Workflow

    host_json = json.loads((ROOT / "host.json").read_text())
    base = REGISTRY.get()
    extra = [Step(f"check_{i}", service=f"extra{i}", operation="check", compensation=None,
                  budget=timedelta(seconds=5)) for i in range(3)]
    grown = Registry.of([*REGISTRY.workflows, Workflow(
        name="grown", steps=(*base.steps, *extra), message=base.message)])
    assert thread_pool(grown, host_json) >= most_invocations_at_once(host_json, 16) + 3 * 24
    assert bicep_names(INFRA).app_settings["PYTHON_THREADPOOL_THREAD_COUNT"] == str(
        thread_pool(REGISTRY, host_json))
