"""A re-drive measured (`make redrive-run`): many failed orders (failed at the default workflow's
last step, their earlier work undone, as after a carrier's outage) re-driven through the local
host against that step's service limited to so many calls a second. What it measures: what the
service was sent and took (most calls begun in any one second, against its limit), whether any
order was resubmitted or shipped twice or left unfinished, and the progress an operator saw,
read every few seconds as `orders redrives show ID --watch` reads it.

    python -m localrun.bench.redriving [--orders 10000] [--per-second 20]

It starts its own Azurite; the simulated services make no faults.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from localrun.bench.driver import ROOT, own_azurite
from localrun.bench.limiting import Seen, most_in_a_second, peak_at_once
from shared.settings import limit_setting_names

# How often the operator looks at the re-drive's progress.
LOOK_SECONDS = 5.0
ERROR = "HTTP 503 from the carrier: service unavailable"


def failed_orders(c: Any, n: int, step: str) -> list[str]:
    """``n`` orders of the default workflow, stored as failed at ``step`` and undone."""
    from orderctl.samples import sample_orders
    from shared.domain.state import CompensationState, ProcessState
    from shared.domain.transitions import receive

    workflow = c.workflows.get()
    now = datetime.now(UTC)

    def one(o: dict[str, Any]) -> str:
        state = c.store.create(c.workflows.parse(json.dumps(o)),
                               receive(o["order_id"], workflow, now))
        state.process_state, state.compensation = ProcessState.ERROR, CompensationState.DONE
        state.failed_step, state.last_error = step, ERROR
        state.complete_by = None
        c.store.save(state)
        return str(o["order_id"])

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, sample_orders(n, prefix="rd", seed=7)))


def redrive_run(connection: str, orders: int, per_second: float,
                timeout: float = 7200) -> dict[str, Any]:
    import function_app
    from localrun.appsettings import isolated_names, local_app_settings
    from localrun.azurite import free_port
    from localrun.host.host import LocalFunctionHost
    from shared import bootstrap
    from shared.handlers.operator_requests import RedriveRequest
    from shared.settings import load_settings
    from shared.workflows import REGISTRY

    step = REGISTRY.get().steps[-1]
    _, per_second_key = limit_setting_names(step.service)
    port = free_port()
    env = local_app_settings(connection, port, **isolated_names("rd"),
                             SimTransientErrorRate="0", SimPermanentErrorRate="0",
                             SimHangRate="0", SimLatencyMs="20",
                             **{per_second_key: str(per_second)})
    c = bootstrap.build(load_settings(env))
    bootstrap.reset(c)
    c.ensure_resources()
    made = time.time()
    ids = failed_orders(c, orders, step.name)
    made_s = time.time() - made
    seen = Seen()
    seen.watch(c, step.service)
    host = LocalFunctionHost(function_app.app, settings=env, storage_connection=connection,
                             host_json=ROOT / "host.json", http_port=port, poll_interval=0.2)
    host.start()
    looks: list[dict[str, Any]] = []
    try:
        started = time.time()
        rid = c.redrives.start(RedriveRequest(failed_step=step.name, error_text="503",
                                              reason="carrier back", dry_run=False),
                               "bench").Id
        states = c.tables.get_table_client(c.settings.state_table)
        while time.time() - started < timeout:
            time.sleep(LOOK_SECONDS)
            view = c.redrives.get(rid)
            looks.append({"at_s": round(time.time() - started, 1), "state": view.State,
                          "resubmitted": view.Resubmitted, "refused": view.Refused,
                          "calls": len(seen.sent),
                          "granted_most_begun_in_a_second": most_in_a_second(seen.granted),
                          "sent_most_begun_in_a_second": most_in_a_second(seen.sent)})
            # Each look on stderr as it is taken: a run stopped before its end keeps its numbers.
            print(json.dumps(looks[-1]), file=sys.stderr, flush=True)
            if view.State != "done":
                continue
            # Once it is done: how many have finished (a scan of the table, not every look).
            processed = sum(1 for _ in states.query_entities(
                "RowKey eq 'state' and ProcessState eq 'Processed'", select=["PartitionKey"]))
            looks[-1]["processed"] = processed
            if processed + view.Refused >= orders:
                break
        elapsed = time.time() - started
    finally:
        host.stop()
        bootstrap.reset()
    records = {e["PartitionKey"]: e for e in states.query_entities(
        "RowKey eq 'state'", select=["PartitionKey", "ProcessState", "Resubmissions"])}
    effects = Counter(str(e.get("OrderID")) for e in c.tables.get_table_client(
        c.settings.simulator_table).query_entities(
            "PartitionKey eq @s and Status eq 'applied'", parameters={"s": step.service}))
    view = c.redrives.get(rid)
    return {
        "orders": orders, "service": step.service, "per_second": per_second,
        "stored_failed_orders_s": round(made_s, 1), "wall_s": round(elapsed, 1),
        "redrive": {"state": view.State, "resubmitted": view.Resubmitted,
                    "refused": view.Refused, "rate": view.Rate, "scanned": view.Scanned},
        "processed": sum(r["ProcessState"] == "Processed" for r in records.values()),
        "resubmitted_more_than_once": sum(int(r.get("Resubmissions") or 0) > 1
                                          for r in records.values()),
        "not_resubmitted": sum(int(r.get("Resubmissions") or 0) == 0
                               for r in records.values()),
        "shipped_twice": sum(1 for o in ids if effects[o] > 1),
        "not_shipped": sum(1 for o in ids if effects[o] == 0),
        "calls": len(seen.sent),
        "granted_most_begun_in_a_second": most_in_a_second(seen.granted),
        "sent_most_begun_in_a_second": most_in_a_second(seen.sent),
        "service_most_begun_in_a_second": most_in_a_second(seen.calls),
        "sent_peak_at_once": peak_at_once(seen.sent),
        "progress_looks": looks,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localrun.bench.redriving")
    p.add_argument("--orders", type=int, default=10_000)
    p.add_argument("--per-second", type=float, default=20.0)
    args = p.parse_args(argv)
    with own_azurite("redrive-run") as az:
        when = datetime.now(UTC).isoformat(timespec="seconds")
        result = redrive_run(az.connection_string, args.orders, args.per_second)
    print(json.dumps({"when": when, **result}, indent=2))
    ok = (result["processed"] == args.orders and result["resubmitted_more_than_once"]
          == result["not_resubmitted"] == result["shipped_twice"] == result["not_shipped"] == 0
          and result["granted_most_begun_in_a_second"] <= int(args.per_second))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
