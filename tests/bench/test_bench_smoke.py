"""A few orders through `make bench`, so the benchmark cannot rot.

Timings are not asserted here (the report says whether targets were met). Request counts are:
they are deterministic for a fault-free order, and they are the cloud bill.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from localrun.azurite import Azurite
from localrun.bench.bench import Bench, Scale, per_order, run_bench
from localrun.bench.bench import main as bench_main
from shared.adapters.state_store import TableOrderStore
from tests.conftest import ROOT

# A fault-free 3-step order; the Supervisor's tick-log writes apart (time drives them). The demo
# is held to the same figures (tests/e2e/test_demo.py).
FAULT_FREE_3_STEP = {"table_writes": 10, "scheduler_table_reads": 3, "agent_table_reads": 3,
                     "queue_sends": 6}
# Round numbers, not Azure's: the test checks the arithmetic, not the price.
SAMPLE_PRICES: dict[str, Any] = {
    "source": "test", "region": "nowhere", "date": "2026-01-01",
    "table_transactions_per_10k": 0.001, "queue_transactions_per_10k": 0.01,
    "service_bus_standard_base_per_month": 10.0,
    "service_bus_included_operations_per_month": 1_000_000,
    "service_bus_operations_per_million": 1.0, "executions_per_million": 0.5,
    "gb_seconds": 0.00002, "ingestion_per_gb": 3.0,
    "free_grants_per_month": {"flex_gb_seconds": 1000, "flex_executions": 1000,
                              "ingestion_gb": 1}}


def test_the_counts_include_what_follows_the_write_that_settled_an_order(
        azurite: Azurite, app_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """That write's outbox still runs: the status message and, last, the removal of the order's
    index entry. Held back past the bench's 2 s look at the records, they count all the same."""
    app_env()  # function_app reads the settings when it is imported
    drop = TableOrderStore.drop

    def late_drop(self: TableOrderStore, key: str) -> None:
        time.sleep(3)
        drop(self, key)

    monkeypatch.setattr(TableOrderStore, "drop", late_drop)
    counts = per_order(Bench(azurite.connection_string, Scale.smoke()).run_orders("late", 3))
    assert counts["table_writes"] - counts["supervisor_table_writes"] == FAULT_FREE_3_STEP[
        "table_writes"]
    assert counts["write_breakdown"]["table.delete"] == 1


def test_bench_smoke_writes_a_complete_report(tmp_path: Path) -> None:
    results = run_bench(tmp_path, Scale.smoke(), SAMPLE_PRICES)
    for name in ("report.json", "report.md", "chart.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report) >= {"transactions", "ceiling", "throughput", "supervisor", "recovery",
                           "starvation", "tracing", "latency_breakdown", "memory_peak_mb",
                           "machine"}
    deployed = json.loads((ROOT / "local.settings.template.json").read_text())["Values"]
    assert report["starvation"]["deployed"]["threads"] == int(
        deployed["PYTHON_THREADPOOL_THREAD_COUNT"])
    # Where the time goes: every hop of the straight path has a median.
    hops = report["latency_breakdown"]["median_s"]
    assert {"1 service bus wait", "1 intake", "2 scheduler start", "3 queue wait before agent "
            "inventory", "8 scheduler reply 3", "remote call payment charge", "total"} <= set(hops)
    # The start runs inside intake's invocation: no queue between them, no negative wait.
    assert "2 queue wait before scheduler start" not in hops
    assert all(v >= 0 for v in hops.values())
    assert report["latency_breakdown"]["orders"] > 0
    # One trace per order: an intake, a start, three Agents, three calls, three replies.
    tr = report["tracing"]
    assert tr["spans_by_name_per_order"]["intake"] == 1
    assert tr["spans_by_name_per_order"]["scheduler reply"] == 3
    assert tr["spans_per_order"] >= 11 and tr["telemetry_items_per_order"] > tr["spans_per_order"]
    # At the default ratio, whole traces of a share of the orders: each kept order costs what
    # one order costs at full fidelity.
    full, sampled = tr["telemetry_bytes_per_order"], tr["telemetry_bytes_per_order_sampled"]
    assert sampled == pytest.approx(full * tr["orders_traced_sampled"] / tr["orders"], rel=0.25)
    assert tr["orders_traced_sampled"] < tr["orders"] or tr["orders"] < 20
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Which process was the limit: both were measured, in the ceilings and in the run.
    tp = report["throughput"]
    for window in ("ceiling_before", "run", "ceiling_after"):
        assert tp["cpu_cores"][window]["azurite"] > 0, window
        assert tp["cpu_cores"][window]["bench_process"] > 0, window
    assert tp["cpu_ms_per_order"]["azurite"] > 0 and tp["cpu_ms_per_order"]["bench_process"] > 0
    # The functions ran in a worker process of their own, as in Azure: it was measured too,
    # and its meter's counts reached the run's (the host makes no table writes of its own).
    assert tp["worker_process"] and tp["cpu_cores"]["run"]["worker_process"] > 0
    assert tp["every_request_seconds_per_order"]["table_writes"] > 0
    # ... so the bound takes the better of one and two client processes, kind by kind: never
    # less than one process's.
    for two in (tp["ceiling_two_processes"], tp["ceiling_after_two_processes"]):
        assert set(two) == set(report["ceiling"]) and all(v > 0 for v in two.values())
    assert tp["bound_every_request_orders_per_s"] >= tp["bound_one_process_orders_per_s"]
    # ... and against the ceilings of each side of the run alone, to show how far drift moved it.
    assert set(tp["ratio_to_every_request_bound_by_side"]) == {"before", "after"}
    assert all(v > 0 for v in tp["ratio_to_every_request_bound_by_side"].values())
    assert "against the ceilings measured before the run alone" in (
        tmp_path / "report.md").read_text()
    assert "two client processes at once" in (tmp_path / "report.md").read_text()
    # ... and the bench process's share by whose work its threads did: the host's, not the
    # functions' (their pool is the worker's).
    roles = tp["cpu_ms_per_order_by_role"]
    assert roles["host"] > 0 and roles.get("functions", 0) == 0
    assert sum(roles.values()) == pytest.approx(tp["cpu_ms_per_order"]["bench_process"], rel=0.05)
    assert "busy cores of Azurite" in (tmp_path / "report.md").read_text()
    assert "of the worker process" in (tmp_path / "report.md").read_text()
    # The Service Bus stand-in: each order's message received and completed, apart from storage.
    sb = report["transactions"][0]["local_service_bus"]
    assert sb["delete"] == 1 and sb["receive"] > 0
    assert "stand-in for Service Bus" in (tmp_path / "report.md").read_text()
    # ... and the functions' share by function: each of the pipeline's ran and was charged.
    by_function = tp["cpu_ms_per_order_by_function"]
    assert {"intake", "scheduler_replies", "inventory_agent", "payment_agent", "shipping_agent",
            "simulated_service"} <= {name for name, ms in by_function.items() if ms > 0}
    # Within the worker process's own.
    assert sum(by_function.values()) <= tp["cpu_ms_per_order"]["worker_process"]
    # The bill of quantities, and the bill by meter from it at each monthly volume.
    cost = report["cost"]
    q = cost["quantities_per_order"]["3-step"]
    assert q["table_transactions"] > 0 and q["queue_transactions"] > 0
    # Service Bus as the SDK calls it: the send, each receive, complete and lock renewal.
    assert q["service_bus_completes"] == 1 and q["service_bus_receives"] > 0
    assert q["service_bus_operations"] == pytest.approx(
        1 + q["service_bus_receives"] + q["service_bus_completes"]
        + q["service_bus_lock_renewals"])
    assert q["executions"] >= 7 and q["gb_seconds"] > 0
    assert q["ingested_bytes"] >= tr["telemetry_bytes_per_order_sampled"]  # the default's
    # The idle app: its Supervisor tick on an empty store was measured, not estimated.
    idle = cost["idle_per_day"]
    assert idle["tick_measured"] and idle["tick_table_transactions"] > 0
    priced = cost["priced"]["3-step"]
    one_m, ten_m = priced["by_volume"]["1000000"], priced["by_volume"]["10000000"]
    assert one_m["gross_per_million_orders_usd"] == pytest.approx(
        sum(one_m["per_million_orders_usd"].values()))
    assert one_m["total_per_million_orders_usd"] == pytest.approx(
        one_m["gross_per_million_orders_usd"] + one_m["free_grants_per_million_orders_usd"])
    # The base charge is the month's, shared among its orders.
    assert one_m["per_million_orders_usd"]["service_bus_base"] == pytest.approx(10.0)
    assert ten_m["per_million_orders_usd"]["service_bus_base"] == pytest.approx(1.0)
    md = (tmp_path / "report.md").read_text()
    assert "$ per million orders by meter" in md and "Idle, a deployed app" in md
    # Prices change, the quantities do not: the same report priced again, running nothing.
    doubled = {**SAMPLE_PRICES, "source": "twice the test's", "date": "2026-02-02", **{
        k: 2 * v for k, v in SAMPLE_PRICES.items()
        if k.endswith(("_10k", "_million", "_month", "_gb", "gb_seconds"))
        and k != "service_bus_included_operations_per_month" and not isinstance(v, dict)}}
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(doubled))
    assert bench_main(["--out", str(tmp_path), "--prices", str(prices), "--price-only"]) == 0
    again = json.loads((tmp_path / "report.json").read_text())
    assert again["cost"]["priced"]["3-step"]["by_volume"]["1000000"][
        "total_per_million_orders_usd"] == pytest.approx(2 * one_m["total_per_million_orders_usd"])
    assert again["cost"]["quantities_per_order"] == cost["quantities_per_order"]
    assert again["throughput"] == report["throughput"]
    assert "at the prices of 2026-02-02" in (tmp_path / "report.md").read_text()
    # ... and without --prices, at the prices the repository ships.
    assert bench_main(["--out", str(tmp_path), "--price-only"]) == 0
    shipped = json.loads((ROOT / "docs" / "azure-prices.json").read_text())
    again = json.loads((tmp_path / "report.json").read_text())
    assert again["cost"]["priced"]["3-step"]["prices"]["date"] == shipped["date"]

    three = next(t for t in results["transactions"]
                 if t["workflow"] == "3-step" and t["transient_fault_rate"] == 0)
    # One atomic intake + four transitions + the in-flight index entry and its removal, and
    # the three outboxes that dispatch a step confirmed sent (README, "What it costs").
    # Without faults the Supervisor writes only its tick log, once per tick that fell in the run.
    assert three["table_writes"] - three["supervisor_table_writes"] == FAULT_FREE_3_STEP[
        "table_writes"]
    assert three["scheduler_table_reads"] == FAULT_FREE_3_STEP["scheduler_table_reads"]
    # One read of the order per Agent request: the request checked against the record.
    assert three["agent_table_reads"] == FAULT_FREE_3_STEP["agent_table_reads"]
    assert three["queue_sends"] == FAULT_FREE_3_STEP["queue_sends"]
    # What the worker would forward and Azure bill: the app's own records only, one per order
    # from a fault-free run (no SDK request dumps); plus the host's two per invocation.
    assert three["log_records_by_logger"].get("shared.handlers.intake") == 1
    assert not any(k.startswith(("azure", "httpx")) for k in three["log_records_by_logger"])
    assert three["host_log_records"] == 2 * three["invocations"]
    one = next(t for t in results["transactions"]
               if t["workflow"] == "1-step" and t["transient_fault_rate"] == 0)
    assert one["table_writes"] - one["supervisor_table_writes"] == 6
    assert one["queue_sends"] == 2
    s = results["supervisor"]
    # The index entry and the state record of each overdue order, and the Supervisor's tick
    # log: neither the completed orders nor the ones in flight and not due are read.
    assert s["idle_in_flight"] > 0
    assert (s["after"]["entities_read"] == s["before"]["entities_read"]
            == s["with_idle"]["entities_read"] == 2 * s["expired"] + 1)
    # Each reported tick acted on every overdue order (none ran out of rescues on the way), and
    # timed the control: as many reads of entities with row keys of their own.
    for case in ("before", "after", "alone", "with_idle"):
        assert s[case]["acted_on"] == s["expired"], case
        assert s[case]["azurite_control_reads_s"] > 0, case
    assert results["throughput"]["orders_per_s"] > 0
    assert "Targets:" in (tmp_path / "report.md").read_text()
