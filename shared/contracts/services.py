"""The services the registered workflows call, as the deployment needs them: for each, its
request queue, the settings that name the queue and the service's URL, and its Agent function.

Written to ``infra/services.json`` by ``python -m shared.contracts``; the Bicep reads it
(``loadJsonContent``) to create the queues and settings, so a service added to a workflow is
deployed with no edit to the Bicep. The drift check holds the file to the registry.
"""

from __future__ import annotations

from typing import Any

from shared.domain.workflow import Registry, agent_function
from shared.settings import default_queue, service_setting_names


def services_document(workflows: Registry) -> dict[str, Any]:
    """The services, and what the Bicep takes from them as it is (it has no loops over them:
    the lambdas they would need are past what the checks' Bicep parsers read)."""
    services = []
    for name in workflows.services:
        url_setting, queue_setting = service_setting_names(name)
        services.append({
            "name": name,
            "agentFunction": agent_function(name),
            "queue": default_queue(name),
            "queueSetting": queue_setting,
            "urlSetting": url_setting,
            "workflows": sorted({w.name for w in workflows.workflows if name in w.agents}),
        })
    return {
        "services": services,
        "queues": [s["queue"] for s in services],
        "queueSettings": {s["queueSetting"]: s["queue"] for s in services},
        "urlSettings": [s["urlSetting"] for s in services],
    }
