"""Test fixtures: a real Azurite for the session, unique table and queue names per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from localrun.appsettings import isolated_names
from localrun.azurite import Azurite
from shared import bootstrap
from shared.workflows import REGISTRY

# `make unit`, the loop a developer runs after each change, searches a quarter as far as the
# whole suite does (HYPOTHESIS_PROFILE=quick); `make test` and CI search in full.
QUICK = os.environ.get("HYPOTHESIS_PROFILE") == "quick"


def examples(n: int) -> int:
    """How many examples a property test draws: ``n``, or a quarter of it in the quick loop."""
    return max(10, n // 4) if QUICK else n

# As function_app.py does for the app: the tests that wire the app themselves run its workflows.
bootstrap.configure(REGISTRY)
# function_app.py indexes the simulated services only when they are on, and it is imported once
# per test process: on, as in every local run (a test that needs them off says so in its
# settings; tests/unit/test_function_index.py imports the app with them off).
os.environ.setdefault("SimulatorsEnabled", "true")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    az = Azurite.start()
    try:
        yield az
    finally:
        az.stop()


def unique_settings(connection: str, **overrides: str) -> dict[str, str]:
    """A full set of app settings whose tables and queues no other test uses."""
    t = uuid.uuid4().hex[:10]
    settings = {
        "AzureWebJobsStorage": connection,
        "ServiceBusConnection": "local",
        **isolated_names(t),
        "SupervisorSchedule": "*/1 * * * * *",
        "ReplyQueueAllowList": f"status-{t}*",
        "SimulatorsEnabled": "true",
        "SchedulerInstanceId": "scheduler-test",
        "AgentRetryBaseSeconds": "0.05",
        "AgentRetryMaxSeconds": "0.3",
        # The local host's function key, which the Agents present to the simulated services.
        "LOCALRUN_FUNCTION_KEY": "test-function-key",
        "RemoteServiceKey": "test-function-key",
    }
    settings.update(overrides)
    return settings


@pytest.fixture
def make_settings(azurite: Azurite) -> Callable[..., dict[str, str]]:
    return lambda **overrides: unique_settings(azurite.connection_string, **overrides)


@pytest.fixture
def app_env(make_settings: Callable[..., dict[str, str]],
            monkeypatch: pytest.MonkeyPatch) -> Callable[..., dict[str, str]]:
    """Set app settings in the environment, as the host does, and rebuild the container."""
    from shared import bootstrap

    def apply(**overrides: str) -> dict[str, str]:
        settings = make_settings(**overrides)
        for k, v in settings.items():
            monkeypatch.setenv(k, v)
        bootstrap.reset()
        bootstrap.container().ensure_resources()
        return settings

    yield apply  # type: ignore[misc]
    bootstrap.reset()


class FakeClock:
    """A clock the test moves; handlers read it instead of the wall clock."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def wait_until(condition: Callable[[], object], timeout: float = 30.0,
               interval: float = 0.05, message: str = "condition") -> object:
    """Poll a condition until it is truthy; fail with the message after the timeout."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


# function_app.py checks settings on import, as the host would; unit tests import it with the
# local defaults (no storage is touched until a test asks for a container; the services are
# the local host's simulated ones).
os.environ.setdefault("AzureWebJobsStorage", "UseDevelopmentStorage=true")
os.environ.setdefault("SimulatorsEnabled", "true")
# The key the app's calls to the simulators carry (the example's payment code's too).
os.environ.setdefault("RemoteServiceKey", "test-function-key")
