"""A short `make redrive-run`, so the measurement cannot rot: failed orders re-driven through
the local host against a limited service are each resubmitted and shipped once, all finish,
the limit holds, and the operator's looks show progress."""

from __future__ import annotations

from typing import Any

from localrun.azurite import Azurite
from localrun.bench.redriving import redrive_run


def test_failed_orders_redriven_through_a_limited_service_each_finish_once(
        azurite: Azurite, app_env: Any) -> None:
    app_env()  # function_app reads the settings when it is imported
    result = redrive_run(azurite.connection_string, 60, per_second=10, timeout=120)
    assert result["processed"] == result["calls"] == 60, result
    assert (result["resubmitted_more_than_once"], result["not_resubmitted"],
            result["shipped_twice"], result["not_shipped"]) == (0, 0, 0, 0), result
    assert result["redrive"] == {"state": "done", "resubmitted": 60, "refused": 0,
                                 "rate": 10.0, "scanned": 60}, result
    assert result["granted_most_begun_in_a_second"] <= 10, result
    counts = [look["resubmitted"] for look in result["progress_looks"]]
    assert counts == sorted(counts) and counts[-1] == 60, result
