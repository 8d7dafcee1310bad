"""A short `make limit-run`, so the measurement cannot rot: a backlog through a limited service
is sent within its limit (at once, and a second), every order is processed, and the limit's
storage transactions per call are what docs/operating.md says."""

from __future__ import annotations

from typing import Any

from localrun.azurite import Azurite
from localrun.bench.driver import Scale
from localrun.bench.limiting import limit_run, limited_service
from localrun.bench.scenarios import Bench


def test_a_backlog_through_a_limited_service_is_sent_within_its_limit(
        azurite: Azurite, app_env: Any) -> None:
    app_env()  # function_app reads the settings when it is imported
    result = limit_run(Bench(azurite.connection_string, Scale.smoke()), 30, limited_service(),
                       at_once=2, per_second=10)
    free, lim = result["unlimited"], result["limited"]
    assert free["processed"] == lim["processed"] == lim["calls"] == 30, result
    assert lim["sent_peak_at_once"] <= 2 < free["sent_peak_at_once"], result
    assert lim["granted_most_begun_in_a_second"] <= 10, result
    # A grant and a give-back a call, and a read now and then after another call's write.
    assert 2.0 <= result["limit_transactions_per_call"] <= 2.5, result
