"""GET /api/health answers within seconds when storage does not, as a 503 naming each check;
GET /api/health/details tells an operator why, and how the app is doing: the breakers, the last
Supervisor tick, the backlog per queue."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any

import httpx

from localrun.azurite import Azurite, free_port
from shared.bootstrap import health_probe
from shared.configuration import resolve
from shared.handlers.health import HealthProbe
from shared.handlers.principal import READ_ROLE, RESUBMIT_ROLE
from shared.settings import AZURITE_CONNECTION, load_settings
from shared.workflows import REGISTRY
from tests.conftest import unique_settings
from tests.integration.conftest import RunningHost
from tests.integration.test_operator_api import signed_in


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
    # Anyone's answer: the verdict, never why (an error's text names hosts and accounts).
    assert report["checks"] == {"fast": "ok", "hung": "no answer within 0.5 s",
                                "broken": "failed"}
    assert took < 2


def test_an_operator_is_told_why_in_words_without_python_internals() -> None:
    from azure.core.exceptions import ResourceNotFoundError, ServiceRequestError

    def refused() -> None:
        raise ServiceRequestError("<urllib3.connection.HTTPConnection object at 0x7f>: Failed "
                                  "to establish a new connection: [Errno 111] refused")

    def missing() -> None:
        raise ResourceNotFoundError("The specified queue does not exist.")

    probe = HealthProbe({"refused": refused, "missing": missing, "broken": lambda: 1 / 0},
                        deadline=2)
    checks = probe.run(detailed=True)["checks"]
    assert checks == {"refused": "unreachable (no connection, or it timed out)",
                      "missing": "does not exist",
                      "broken": "failed (the app's log has the details)"}
    assert not any(w in str(checks) for w in ("Error", "urllib3", "0x", "Exception"))


def test_storage_that_refuses_connections_is_reported_within_five_seconds() -> None:
    settings = load_settings(unique_settings(_dead(free_port())))
    report, took = _timed(health_probe(resolve(settings, REGISTRY)))
    assert report["status"] == "unhealthy" and took < 5, (took, report)
    assert all(v != "ok" for v in report["checks"].values())


def test_storage_that_hangs_is_reported_within_five_seconds() -> None:
    az = Azurite.start()
    try:
        settings = load_settings(unique_settings(az.connection_string))
        probe = health_probe(resolve(settings, REGISTRY))
        os.killpg(az.process.pid, signal.SIGSTOP)
        try:
            report, took = _timed(probe)
        finally:
            os.killpg(az.process.pid, signal.SIGCONT)
        assert report["status"] == "unhealthy" and took < 5, (took, report)
    finally:
        az.stop()


def test_health_details_report_breakers_the_last_tick_and_the_backlog(run_host: Any) -> None:
    """Issue 33, item 4: health said "ok" while a service's breaker was open, the Supervisor
    had stopped or work piled up. The operator's route says each; the machine route still
    says only the verdict."""
    h: RunningHost = run_host(only={"health", "health_details"},
                              LOCALRUN_FUNCTION_KEY="fn-key", LOCALRUN_MASTER_KEY="master-key")
    env = h.env
    scheduler_q, payment_q = env["SchedulerQueueName"], env["PaymentRequestsQueueName"]
    queues = h.container.queues
    for i in range(3):  # nothing takes them: only the health routes run
        queues.get_queue_client(scheduler_q).send_message(f"m{i}")
    poison = queues.get_queue_client(f"{payment_q}-poison")
    poison.create_queue()
    poison.send_message("given up")
    # The payment service failed: its breaker (this instance's) is open.
    breaker = h.container.agents["payment"]._breaker  # the Agent's own, as it calls
    for _ in range(5):  # CircuitBreakerFailures' default
        with contextlib.suppress(ZeroDivisionError):
            breaker.call(lambda: 1 / 0)
    assert breaker.state == "open"
    base = f"http://127.0.0.1:{h.port}/api"
    with httpx.Client(base_url=base, timeout=10, headers=signed_in(READ_ROLE)) as c:
        d = c.get("/health/details")
        assert d.status_code == 200, d.text
        body = d.json()
        assert body["breakers"]["payment"] == "open"
        assert body["breakers"]["inventory"] == "closed"
        assert body["backlog"][scheduler_q] == 3 and body["backlog"][payment_q] == 0
        assert body["poison"][payment_q] == 1 and body["poison"][scheduler_q] == 0
        # A fresh store: no Supervisor has ever ticked, which is worth saying.
        assert body["supervisor"]["late"] is True
        assert body["supervisor"]["problem"] == "no tick recorded yet"

        h.container.supervisor.tick()
        sup = c.get("/health/details").json()["supervisor"]
        assert sup["late"] is False and sup["problem"] is None
        assert 0 <= sup["seconds_since"] < 30 and sup["last_tick"]

        queues.delete_queue(payment_q)
        d = c.get("/health/details")
        assert d.status_code == 503
        assert d.json()["checks"][f"queue:{payment_q}"] == "does not exist"
        assert d.json()["backlog"][payment_q] is None

    plain = httpx.get(f"{base}/health", headers={"x-functions-key": "fn-key"}, timeout=10)
    assert plain.status_code == 503
    assert plain.json() == {"status": "unhealthy", "checks": {
        **{k: "ok" for k in plain.json()["checks"]}, f"queue:{payment_q}": "failed"}}
    # No identity, no details; a key opens no operator route.
    assert httpx.get(f"{base}/health/details", headers={"x-functions-key": "fn-key"},
                     timeout=10).status_code == 401
    assert httpx.get(f"{base}/health/details", headers=signed_in(RESUBMIT_ROLE),
                     timeout=10).status_code == 403
