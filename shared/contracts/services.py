"""The services the registered workflows call, as the deployment needs them: for each, its
request queue, the settings that name the queue and the service's URL, and its Agent function.

Written to ``infra/services.json`` by ``python -m shared.contracts``; the Bicep reads it
(``loadJsonContent``) to create the queues and settings, so a service added to a workflow is
deployed with no edit to the Bicep. The drift check holds the file to the registry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shared.domain.workflow import Registry, agent_function
from shared.settings import default_queue, service_setting_names

HOST_JSON = Path(__file__).resolve().parents[2] / "host.json"
# The Scheduler's two queue-triggered functions; the Agents are one per service.
SCHEDULER_QUEUE_FUNCTIONS = 2
# The timers: the Supervisor's and the re-drive runner's, one invocation each at a time.
TIMER_FUNCTIONS = 2
# infra/main.bicep's httpPerInstanceConcurrency default (tests/infra/test_thread_pool.py).
HTTP_PER_INSTANCE = 16


def thread_pool(workflows: Registry, host_json: dict[str, Any]) -> int:
    """PYTHON_THREADPOOL_THREAD_COUNT: every invocation the host may start at once has a
    thread, even with every function on one instance, so a hung Agent never keeps the Scheduler,
    the Supervisor or /health waiting. Rounded up to a multiple of 50, for headroom."""
    ext = host_json.get("extensions", {})
    queues, service_bus = ext.get("queues", {}), ext.get("serviceBus", {})
    per_queue_function = queues.get("batchSize", 16) + queues.get("newBatchThreshold", 8)
    need = ((SCHEDULER_QUEUE_FUNCTIONS + len(workflows.services)) * per_queue_function
            + service_bus.get("maxConcurrentCalls", 16) + TIMER_FUNCTIONS + HTTP_PER_INSTANCE)
    return int(-(-need // 50) * 50)


def services_document(workflows: Registry,
                      host_json: dict[str, Any] | None = None) -> dict[str, Any]:
    """The services, and what the Bicep takes from them as it is (it has no loops over them:
    the lambdas they would need are past what the checks' Bicep parsers read)."""
    services = []
    code = workflows.code_services

    def kind_settings(name: str) -> dict[str, Any]:
        if name in code:
            return {"settings": list(code[name].settings)}
        return {"urlSetting": service_setting_names(name)[0]}
    for name in workflows.services:
        queue_setting = service_setting_names(name)[1]
        services.append({
            "name": name,
            # http: the Agent calls the service's URL; code: it runs the user's code, which
            # reads the settings it declares.
            "kind": "code" if name in code else "http",
            "agentFunction": agent_function(name),
            "queue": default_queue(name),
            "queueSetting": queue_setting,
            **kind_settings(name),
            "workflows": sorted({w.name for w in workflows.workflows if name in w.agents}),
        })
    return {
        "services": services,
        "queues": [s["queue"] for s in services],
        "queueSettings": {s["queueSetting"]: s["queue"] for s in services},
        "urlSettings": [s["urlSetting"] for s in services if "urlSetting" in s],
        # The code services' own settings (a provider's URL, a Key Vault reference to its key):
        # given through the same serviceUrls parameter as the URLs.
        "codeSettings": [x for s in services for x in s.get("settings", [])],
        # A string: the Bicep sets it as an app setting as it is.
        "threadPool": str(thread_pool(
            workflows, host_json if host_json is not None else json.loads(HOST_JSON.read_text()))),
    }
