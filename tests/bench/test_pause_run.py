"""A short `make pause-run`, so the measurement cannot rot: a service paused under load and
resumed costs no order a failure, an undo or a counted failure, and every order finishes."""

from __future__ import annotations

from typing import Any

from localrun.azurite import Azurite
from localrun.bench.driver import Scale
from localrun.bench.pausing import middle_service, pause_run
from localrun.bench.scenarios import Bench, _every_step


def test_a_service_paused_under_load_costs_no_order_anything(
        azurite: Azurite, app_env: Any) -> None:
    app_env()  # function_app reads the settings when it is imported
    result = pause_run(Bench(azurite.connection_string, Scale.smoke()), pause_s=6, rate=3,
                       service=middle_service(), margin_s=3, StepBudgetSeconds=_every_step(4),
                       PendingGraceSeconds="5", SupervisorSchedule="*/1 * * * * *")
    assert result["processed"] == result["orders"] == 36, result
    assert (result["failed"], result["undone"], result["failures_counted"]) == (0, 0, 0), result
    # The pause did bite: orders waited at the paused service and were sent on after it.
    assert result["orders_sent_again_after_resume"] >= 1, result
