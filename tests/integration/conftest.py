from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from localrun.metering import StorageMeter
from shared import bootstrap
from shared.domain.workflow import Registry
from shared.settings import load_settings
from tests.conftest import FakeClock
from tests.workflow import REGISTRY as TEST_REGISTRY
from tests.workflow import queue_settings


@dataclass
class Pipeline:
    env: dict[str, str]
    clock: FakeClock
    meter: StorageMeter
    container: bootstrap.Container
    workflows: Registry

    def sibling(self, instance_id: str) -> bootstrap.Container:
        """Another instance of the app (its own clients and id) on the same store and queues."""
        c = bootstrap.build(load_settings({**self.env, "SchedulerInstanceId": instance_id}),
                            clock=self.clock, workflows=self.workflows)
        self._siblings.append(c)
        return c

    def __post_init__(self) -> None:
        self._siblings: list[bootstrap.Container] = []


@pytest.fixture
def workflows() -> Registry:
    """The workflows a pipeline runs: the engine's test workflow (tests/workflow.py). The
    examples' own tests, and the upgrade tests of their old records, override it."""
    return TEST_REGISTRY


@pytest.fixture
def make_pipeline(app_env: Callable[..., dict[str, str]], clock: FakeClock,
                  workflows: Registry) -> Iterator[Callable[..., Pipeline]]:
    made: list[Pipeline] = []

    def make(**overrides: str) -> Pipeline:
        # These tests move the clock by minutes between ticks: that is not an outage here
        # (tests/unit/test_outages.py and the model test cover outages).
        env = app_env(**{"OutageGapSeconds": "86400", **overrides})
        # This test's own queue for each service (the shipped ones have theirs already).
        env = {**queue_settings(env["StateTableName"][5:].lower(), workflows.services), **env}
        meter = StorageMeter()
        c = bootstrap.build(load_settings(env), clock=clock, table_options=meter.table_options,
                            queue_options=meter.queue_options, workflows=workflows)
        c.ensure_resources()
        bootstrap.reset(c)
        c.supervisor.tick()  # the Supervisor has been ticking since before these orders
        p = Pipeline(env, clock, meter, c, workflows)
        made.append(p)
        return p

    yield make
    for p in made:
        for s in p._siblings:
            s.close()


@pytest.fixture
def pipeline(make_pipeline: Callable[..., Pipeline]) -> Pipeline:
    return make_pipeline(FailureThreshold="3", RetryBackoffSeconds="1",
                         RetryBackoffMaxSeconds="4", PendingGraceSeconds="10",
                         RescueThreshold="3")


def app_of(workflows: Registry) -> Any:
    """The app function_app.py makes, for these workflows, with the simulated services."""
    import azure.functions as func

    from shared.functions import agents, operator_api, pipeline, simulators

    app = func.FunctionApp()
    for bp in (pipeline.pipeline(), agents.agents(workflows.services),
               operator_api.operator_api(), simulators.simulators()):
        app.register_functions(bp)
    return app


@dataclass
class RunningHost:
    env: dict[str, str]
    host: Any
    port: int
    container: bootstrap.Container


@pytest.fixture
def run_host(app_env: Callable[..., dict[str, str]]) -> Iterator[Callable[..., RunningHost]]:
    """Start the local Functions host in this process, on this test's queues and tables."""
    import function_app
    from localrun.azurite import free_port
    from localrun.host.host import LocalFunctionHost
    from tests.conftest import ROOT

    hosts: list[Any] = []

    def start(only: set[str] | None = None, workflows: Registry | None = None,
              **overrides: str) -> RunningHost:
        """``workflows``: an app of these (the engine's tests run the test workflow's) in place
        of function_app's, the shipped examples'."""
        port = free_port()
        env = app_env(**{"SimulatorBaseUrl": f"http://127.0.0.1:{port}/api/sim", **overrides})
        app = function_app.app
        if workflows is not None:
            env = {**queue_settings(env["StateTableName"][5:].lower(), workflows.services), **env}
            app = app_of(workflows)
            c = bootstrap.build(load_settings(env), workflows=workflows)
            c.ensure_resources()
            bootstrap.reset(c)
        host = LocalFunctionHost(app, settings=env,
                                 storage_connection=env["AzureWebJobsStorage"],
                                 host_json=ROOT / "host.json", http_port=port, poll_interval=0.1,
                                 lease_seconds=30, only=only)
        host.start()
        hosts.append(host)
        return RunningHost(env, host, port, bootstrap.container())

    yield start
    for h in hosts:
        h.stop()
