"""The bill by meter from the bill of quantities: arithmetic, the idle day, the shipped prices
(and their drift from the shared ones), and a strict prices file (a missing or misspelt price is
named, never taken as zero)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from localrun.bench import cost
from localrun.bench.bench import instance_memory_mb
from localrun.bench.bench import main as bench_main
from tests.bench.test_bench_smoke import SAMPLE_PRICES
from tests.conftest import ROOT

Q = {"table_transactions": 15.0, "queue_transactions": 20.0, "service_bus_operations": 4.0,
     "executions": 9.0, "gb_seconds": 0.2, "ingested_bytes": 20_000.0}
# No idle app: the per-order arithmetic alone.
NO_IDLE = {"table_transactions": 0.0, "queue_transactions": 0.0, "executions": 0.0,
           "gb_seconds": 0.0, "service_bus_operations": 0.0}


def test_a_month_of_orders_is_each_quantity_times_its_price_by_meter() -> None:
    b = cost.bill(Q, NO_IDLE, SAMPLE_PRICES, 1_000_000)
    assert b["month_usd"] == pytest.approx({
        "table_transactions": 15 * 100 * 0.001,  # 15 M table transactions, per 10,000
        "queue_transactions": 20 * 100 * 0.01,  # queue requests at their own rate
        "service_bus_operations": (4 - 1) * 1.0,  # 4 M, of which 1 M included
        "service_bus_base": 10.0,
        "executions": 9 * 0.5,
        "gb_seconds": 0.2 * 1e6 * 0.00002,
        "ingestion": 20_000 * 1e6 / 1e9 * 3.0,
    })
    # The free grants, a line of their own: 1000 executions, 1000 GB-s, 1 GB.
    assert b["free_grants_month_usd"] == pytest.approx(-(1000 / 1e6 * 0.5 + 1000 * 0.00002
                                                         + 1 * 3.0))
    assert b["total_month_usd"] == pytest.approx(b["gross_month_usd"]
                                                 + b["free_grants_month_usd"])
    # At ten times the orders the base charge is shared ten ways; the rest scales.
    ten = cost.bill(Q, NO_IDLE, SAMPLE_PRICES, 10_000_000)
    assert ten["per_million_orders_usd"]["service_bus_base"] == pytest.approx(1.0)
    assert ten["per_million_orders_usd"]["table_transactions"] == pytest.approx(1.5)
    assert ten["per_million_orders_usd"]["service_bus_operations"] == pytest.approx(3.9)


def test_the_free_grants_never_exceed_what_was_used() -> None:
    b = cost.bill({**Q, "executions": 0.0, "gb_seconds": 0.0, "ingested_bytes": 0.0},
                  NO_IDLE, SAMPLE_PRICES, 1_000_000)
    assert b["free_grants_month_usd"] == 0


def test_quantities_come_from_the_measured_row() -> None:
    row = {"transactions": 37.0, "table_transactions": 15.0, "queue_transactions": 22.0,
           "queue_empty_polls": 2.0, "invocations": 9.0, "log_records": 1.0,
           "host_log_records": 18.0, "log_bytes": 80.0,
           "local_service_bus": {"receive": 1.0, "receive.empty": 40.0, "delete": 1.0,
                                 "update": 0.5}}
    q = cost.quantities(row, orders_per_s=10.0, memory_mb=2048,
                        telemetry={"telemetry_items_per_order": 16.0,
                                   "telemetry_bytes_per_order": 20_000.0})
    assert q["gb_seconds"] == pytest.approx(0.2)  # 2 GB for a tenth of a second
    assert q["log_records"] == 19.0 and q["ingested_bytes"] == 20_080.0
    # Empty polls are time's, not the order's: they are in the idle day.
    assert q["queue_transactions"] == 20.0
    # Service Bus as the SDK calls it (the stand-in's empty receives are the local polling's).
    assert q["service_bus_operations"] == 1 + 1 + 1 + 0.5


def test_the_idle_day_polls_each_queue_at_the_longest_interval() -> None:
    tick = {"seconds": 0.05, "requests": {"table.query": 17, "table.read": 1, "table.write": 1,
                                          "queue.send": 0}}
    d = cost.idle_quantities(6, 2.0, 30.0, tick, 2048)
    assert d["empty_polls"] == d["queue_transactions"] == 6 * 43_200
    assert d["ticks"] == d["executions"] == 2880
    assert d["table_transactions"] == 2880 * 19 and d["tick_measured"]
    assert d["gb_seconds"] == pytest.approx(2880 * 0.05 * 2)
    day = cost.idle_bill(d, SAMPLE_PRICES)
    assert day["queue_empty_polls"] == pytest.approx(6 * 43_200 / 10_000 * 0.01)
    assert day["service_bus_base"] == pytest.approx(10.0 * 24 / 730)
    # Without a measured tick, the stated estimate, and the report says which.
    assert not cost.idle_quantities(6, 2.0, 30.0, None, 2048)["tick_measured"]


def test_the_idle_app_is_part_of_the_month() -> None:
    d = cost.idle_quantities(6, 2.0, 30.0, None, 2048)
    with_idle = cost.bill(Q, d, SAMPLE_PRICES, 1_000_000)
    alone = cost.bill(Q, NO_IDLE, SAMPLE_PRICES, 1_000_000)
    polls = d["queue_transactions"] * cost.DAYS_PER_MONTH / 10_000 * 0.01
    assert with_idle["month_usd"]["queue_transactions"] == pytest.approx(
        alone["month_usd"]["queue_transactions"] + polls)


@pytest.mark.parametrize(("text", "seconds"), [("00:00:02", 2.0), ("00:01:00", 60.0),
                                                ("1.00:00:00", 86_400.0), (None, 60.0)])
def test_max_polling_interval_is_read_from_host_json(text: str | None, seconds: float) -> None:
    host: dict[str, Any] = {"extensions": {"queues": {}}}
    if text is not None:
        host["extensions"]["queues"]["maxPollingInterval"] = text
    assert cost.max_polling_seconds(host) == seconds


def test_a_max_polling_interval_that_is_no_timespan_is_named() -> None:
    with pytest.raises(ValueError, match="maxPollingInterval '2s'"):
        cost.max_polling_seconds({"extensions": {"queues": {"maxPollingInterval": "2s"}}})


@pytest.mark.parametrize(("change", "named"), [
    ({"gb_seconds": ...}, "missing gb_seconds"),
    ({"region": ...}, "missing region"),
    ({"queue_transactions_per_10k": ...}, "missing queue_transactions_per_10k"),
    ({"free_grants_per_month": {"flex_executions": 1, "ingestion_gb": 1}},
     "missing free_grants_per_month.flex_gb_seconds"),
    ({"ingestion_per_gb": "3"}, "not a price: ingestion_per_gb"),
    ({"executions_per_million": -1}, "not a price: executions_per_million"),
    ({"free_grants_per_month": {"flex_executions": True, "ingestion_gb": 1,
                                "flex_gb_seconds": 1}},
     "not a price: free_grants_per_month.flex_executions"),
])
def test_a_prices_file_names_what_is_wrong(tmp_path: Path, change: dict[str, object],
                                           named: str) -> None:
    prices = {k: v for k, v in {**SAMPLE_PRICES, **change}.items() if v is not ...}
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(prices))
    with pytest.raises(ValueError, match=named):
        cost.load_prices(path)


def test_the_shipped_prices_load_with_their_sources_and_date() -> None:
    prices = cost.load_prices()
    assert prices["date"] and prices["sources"] and prices["currency"] == "USD"
    # Table and queue requests are priced apart.
    assert prices["table_transactions_per_10k"] < prices["queue_transactions_per_10k"]


SHARED_PRICES = ROOT.parent / "shared" / "azure-prices.json"


@pytest.mark.skipif(not SHARED_PRICES.exists(),
                    reason="no ../shared/azure-prices.json beside this clone (CI has one)")
def test_the_shipped_prices_are_the_shared_ones() -> None:
    """The repository ships its own copy (a clone has no ../shared); where the shared file is
    beside it, as in CI, the copy must not drift from it."""
    assert json.loads(cost.SHIPPED_PRICES.read_text()) == json.loads(SHARED_PRICES.read_text()), (
        "docs/azure-prices.json differs from ../shared/azure-prices.json: copy it over and "
        "update docs/bill.md")


def test_the_bench_reads_the_instance_size_the_bicep_deploys() -> None:
    assert instance_memory_mb() == 2048


def test_the_idle_app_polls_the_queues_the_bicep_creates() -> None:
    services = json.loads((ROOT / "infra" / "services.json").read_text())
    assert cost.storage_queues() == 2 + len(services["queues"])


def _prices_file(tmp_path: Path) -> Path:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(SAMPLE_PRICES))
    return path


@pytest.mark.parametrize(("report", "named"), [
    (None, "no earlier bench report in"),
    ("{not json", "not a report"),
    (json.dumps({"transactions": [], "when": "x"}), "not a full bench report (no throughput"),
    (json.dumps([1, 2]), "not a bench report"),
    (json.dumps({"transactions": [{"workflow": "3-step", "transient_fault_rate": 0}],
                 "throughput": {"orders_per_s": 1.0}, "machine": {}, "scale": {}}),
     "cannot price this report (no 'table_transactions')"),
    # Priceable, but the report around the price cannot be written again: nothing is written.
    (json.dumps({"transactions": [{"workflow": "3-step", "transient_fault_rate": 0,
                                   "transactions": 30.0, "table_transactions": 14.0,
                                   "queue_transactions": 16.0}],
                 "throughput": {"orders_per_s": 1.0}, "machine": {}, "scale": {}}),
     "cannot price this report (no 'when')"),
])
def test_pricing_a_report_again_names_what_is_wrong_with_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], report: str | None,
        named: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    if report is not None:
        (out / "report.json").write_text(report)
    prices = _prices_file(tmp_path)
    assert bench_main(["--out", str(out), "--prices", str(prices), "--price-only"]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    if report is not None:
        assert (out / "report.json").read_text() == report  # left as it was


def test_pricing_only_takes_the_shipped_prices_and_says_in_a_line_there_is_no_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["--out", str(tmp_path / "none"), "--price-only"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no earlier bench report in" in err
    assert "make bench" in err and "Traceback" not in err


def test_the_prices_template_has_every_key_and_is_refused_until_filled_in() -> None:
    template = json.loads((ROOT / "docs" / "prices.template.json").read_text())
    assert set(template) >= {*cost.UNIT_PRICES, *cost.ABOUT, "free_grants_per_month"}
    assert set(template["free_grants_per_month"]) == set(cost.FREE_GRANTS)
    with pytest.raises(ValueError, match="not a price: table_transactions_per_10k"):
        cost.load_prices(ROOT / "docs" / "prices.template.json")
