"""A service paused under load (`make pause-run`): orders arrive at a steady rate through the
local host while an operator pauses one service for a while and then resumes it. What it
measures: how many orders waited, whether any failed, was undone or had a failure counted
because of the pause (none should), and how long after the resume the last one finished.

    python -m localrun.bench.pausing --pause 300 --rate 2 [--service NAME]

It starts its own Azurite and runs the app's own workflow with no faults, so that every failure
would be the pause's.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from typing import Any

from localrun.bench.driver import Scale, own_azurite
from localrun.bench.scenarios import Bench

# Orders keep arriving this long before the pause and after the resume.
MARGIN_S = 20.0


def pause_run(bench: Bench, pause_s: float, rate: float, service: str,
              margin_s: float = MARGIN_S, **overrides: str) -> dict[str, Any]:
    """``overrides``: app settings (a smoke run's shorter budgets and grace)."""
    n = round(rate * (pause_s + 2 * margin_s))
    marks: dict[str, float] = {}
    app: list[Any] = []  # the run's container, as the operator was handed it

    def operator(c: Any) -> None:
        app.append(c)
        time.sleep(margin_s)
        c.operator.pauses.pause("service", service, "bench: a provider's incident", by="bench")
        marks["paused"] = time.time()
        time.sleep(pause_s)
        c.operator.pauses.resume("service", service, "bench: provider back", by="bench")
        marks["resumed"] = time.time()

    # The bench's usual 5 s ticks and 30 s grace: resumed work goes on within one grace and
    # one tick.
    settings: dict[str, Any] = {"FailureThreshold": "3", **overrides}
    run = bench.run_orders("pause", n, rate=rate, timeout=pause_s + 900, during=operator,
                           **settings)
    c = app[0]
    states = list(c.tables.get_table_client(c.settings.state_table).query_entities(
        "RowKey eq 'state'", select=["OrderID", "ProcessState", "FailureCount", "Rescues",
                                     "Timeline", "UpdatedAt", "Compensation"]))
    timelines = {s["OrderID"]: str(s.get("Timeline") or "") for s in states}
    waited = [o for o, t in timelines.items() if f"waiting: service {service}" in t]
    released = [o for o, t in timelines.items() if f"service {service} resumed" in t]
    last = max(s["UpdatedAt"].timestamp() for s in states)
    return {
        "orders": run.orders, "rate_per_s": rate, "service": service, "pause_s": pause_s,
        "processed": sum(s["ProcessState"] == "Processed" for s in states),
        "failed": sum(s["ProcessState"] == "Error" for s in states),
        "undone": sum(s.get("Compensation") is not None for s in states),
        "failures_counted": sum(int(s.get("FailureCount") or 0) for s in states),
        "orders_held": len(waited), "orders_sent_again_after_resume": len(released),
        "last_settled_after_resume_s": round(last - marks["resumed"], 1),
        "supervisor_ticks": run.invocations.get("supervisor", 0),
        "table_transactions_per_order": round(
            sum(run.usage["requests"].values()) / run.orders, 1),
    }


def middle_service() -> str:
    """The service of the middle step of the app's default workflow: work before and after
    it, as a pause in the middle of an order's life has."""
    from shared.workflows import REGISTRY

    steps = REGISTRY.get().steps
    return steps[len(steps) // 2].service


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localrun.bench.pausing")
    p.add_argument("--pause", type=float, default=300.0, help="seconds the service is paused")
    p.add_argument("--rate", type=float, default=2.0, help="orders a second, throughout")
    p.add_argument("--service", default=None,
                   help="the service to pause (default: the app's default workflow's middle "
                        "step's)")
    args = p.parse_args(argv)
    with own_azurite("pause-run") as az:
        started = datetime.now(UTC).isoformat(timespec="seconds")
        result = pause_run(Bench(az.connection_string, Scale(), azurite_pid=az.process.pid),
                           args.pause, args.rate, args.service or middle_service())
    print(json.dumps({"when": started, **result}, indent=2))
    return 0 if result["failed"] == result["undone"] == result["failures_counted"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
