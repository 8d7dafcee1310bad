from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from localrun.metering import StorageMeter
from shared import bootstrap
from shared.settings import load_settings
from tests.conftest import FakeClock


@dataclass
class Pipeline:
    env: dict[str, str]
    clock: FakeClock
    meter: StorageMeter
    container: bootstrap.Container

    def sibling(self, instance_id: str) -> bootstrap.Container:
        """Another instance of the app (its own clients and id) on the same store and queues."""
        c = bootstrap.build(load_settings({**self.env, "SchedulerInstanceId": instance_id}),
                            clock=self.clock)
        self._siblings.append(c)
        return c

    def __post_init__(self) -> None:
        self._siblings: list[bootstrap.Container] = []


@pytest.fixture
def make_pipeline(app_env: Callable[..., dict[str, str]], clock: FakeClock
                  ) -> Iterator[Callable[..., Pipeline]]:
    made: list[Pipeline] = []

    def make(**overrides: str) -> Pipeline:
        env = app_env(**overrides)
        meter = StorageMeter()
        c = bootstrap.build(load_settings(env), clock=clock, table_options=meter.table_options,
                            queue_options=meter.queue_options)
        bootstrap.reset(c)
        p = Pipeline(env, clock, meter, c)
        made.append(p)
        return p

    yield make
    for p in made:
        for s in p._siblings:
            s.close()


@pytest.fixture
def pipeline(make_pipeline: Callable[..., Pipeline]) -> Pipeline:
    return make_pipeline(FailureThreshold="3", RetryBackoffSeconds="1",
                         RetryBackoffMaxSeconds="4", PendingGraceSeconds="10")
