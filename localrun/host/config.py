"""What the local host reads from host.json and the app settings before anything runs: each
trigger's options, the size of the worker's thread pool, and the worker's telemetry start-up.
A value the host would refuse is a HostConfigError, as it stops the real host at start-up."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class HostConfigError(RuntimeError):
    pass


def _timespan(value: str) -> float:
    h, m, s = value.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


@dataclass(frozen=True)
class QueueOptions:
    max_polling_interval: float = 60.0
    visibility_timeout: float = 0.0
    batch_size: int = 16
    new_batch_threshold: int = 8
    max_dequeue_count: int = 5
    base64: bool = True

    @classmethod
    def from_host_json(cls, host: Mapping[str, Any]) -> QueueOptions:
        q = host.get("extensions", {}).get("queues", {})
        return cls(
            max_polling_interval=_timespan(q.get("maxPollingInterval", "00:01:00")),
            visibility_timeout=_timespan(q.get("visibilityTimeout", "00:00:00")),
            batch_size=int(q.get("batchSize", 16)),
            new_batch_threshold=int(q.get("newBatchThreshold", 8)),
            max_dequeue_count=int(q.get("maxDequeueCount", 5)),
            base64=q.get("messageEncoding", "base64") == "base64",
        )


@dataclass(frozen=True)
class ServiceBusOptions:
    max_concurrent_calls: int = 16
    max_auto_lock_renewal: float = 300.0

    @classmethod
    def from_host_json(cls, host: Mapping[str, Any]) -> ServiceBusOptions:
        sb = host.get("extensions", {}).get("serviceBus", {})
        return cls(max_concurrent_calls=int(sb.get("maxConcurrentCalls", 16)),
                   max_auto_lock_renewal=_timespan(sb.get("maxAutoLockRenewalDuration",
                                                          "00:05:00")))


# The host's default when PYTHON_THREADPOOL_THREAD_COUNT is not set (the worker on its own would
# take min(32, CPUs + 4)).
HOST_DEFAULT_THREAD_COUNT = 1000


def thread_count(settings: Mapping[str, str]) -> int:
    raw = settings.get("PYTHON_THREADPOOL_THREAD_COUNT")
    if raw is None or raw == "":
        return HOST_DEFAULT_THREAD_COUNT
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= 32767:
        raise HostConfigError(
            f"PYTHON_THREADPOOL_THREAD_COUNT={raw!r} must be a whole number from 1 to 32767")
    return n


def init_worker_telemetry(settings: Mapping[str, str]) -> bool:
    """What the Python worker does at its init request, before it imports the app, when
    PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY is true: set up the Azure Monitor distro with
    only the connection string and logger name (everything else from the environment, such as
    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS), and tell the host so that it stops forwarding the
    app's log records itself. Returns whether it did."""
    if settings.get("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY", "").lower() != "true":
        return False
    from azure.monitor.opentelemetry import configure_azure_monitor

    os.environ.setdefault("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "azure_functions")
    try:
        configure_azure_monitor(
            connection_string=settings.get("APPLICATIONINSIGHTS_CONNECTION_STRING"),
            logger_name=settings.get("PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME", ""))
    except Exception:  # the worker logs it and goes on without
        logging.getLogger("localrun.host").exception("Error initializing Azure monitor distro")
        return False
    return True
