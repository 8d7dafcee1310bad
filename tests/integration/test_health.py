"""GET /api/health answers within seconds when storage does not, as a 503 naming each check."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from localrun.azurite import Azurite, free_port
from shared.bootstrap import health_probe
from shared.handlers.health import HealthProbe
from shared.settings import AZURITE_CONNECTION, load_settings
from shared.workflows import REGISTRY
from tests.conftest import unique_settings


def _dead(port: int) -> str:
    """Azurite's well-known account, at a port where nothing listens."""
    return AZURITE_CONNECTION.replace(":10001/", f":{port}/").replace(":10002/", f":{port}/")


def _timed(probe: HealthProbe) -> tuple[dict[str, Any], float]:
    t0 = time.monotonic()
    report = probe.run()
    return report, time.monotonic() - t0


def test_a_check_that_never_answers_is_reported_at_the_deadline() -> None:
    hang = threading.Event()
    probe = HealthProbe({"fast": lambda: None, "hung": lambda: hang.wait(30),
                         "broken": lambda: 1 / 0}, deadline=0.5)
    try:
        report, took = _timed(probe)
    finally:
        hang.set()
    assert report["status"] == "unhealthy"
    assert report["checks"] == {"fast": "ok", "hung": "no answer within 0.5 s",
                                "broken": "ZeroDivisionError: division by zero"}
    assert took < 2


def test_storage_that_refuses_connections_is_reported_within_five_seconds() -> None:
    settings = load_settings(unique_settings(_dead(free_port())))
    report, took = _timed(health_probe(settings, REGISTRY.services))
    assert report["status"] == "unhealthy" and took < 5, (took, report)
    assert all(v != "ok" for v in report["checks"].values())


def test_storage_that_hangs_is_reported_within_five_seconds() -> None:
    az = Azurite.start()
    try:
        settings = load_settings(unique_settings(az.connection_string))
        probe = health_probe(settings, REGISTRY.services)
        os.killpg(az.process.pid, signal.SIGSTOP)
        try:
            report, took = _timed(probe)
        finally:
            os.killpg(az.process.pid, signal.SIGCONT)
        assert report["status"] == "unhealthy" and took < 5, (took, report)
    finally:
        az.stop()
