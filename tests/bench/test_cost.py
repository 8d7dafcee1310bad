"""The price of a million orders from the bill of quantities: arithmetic and a strict prices
file (a missing or misspelt price is named, never taken as zero)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localrun import cost
from localrun.bench import instance_memory_mb
from localrun.bench import main as bench_main
from tests.bench.test_bench_smoke import SAMPLE_PRICES
from tests.conftest import ROOT

Q = {"storage_transactions": 35.0, "table_transactions": 15.0, "queue_transactions": 20.0,
     "service_bus_operations": 3, "executions": 9.0, "gb_seconds": 0.2, "log_records": 1.0,
     "telemetry_items": 16.0, "ingested_bytes": 20_000.0}


def test_a_million_orders_is_each_quantity_times_its_price() -> None:
    p = cost.priced(Q, SAMPLE_PRICES)
    assert p["parts"] == pytest.approx({
        "storage_transactions": 35 * 100 * 0.01,  # 35 M transactions, per 10,000
        "service_bus": 3 * 1.0,
        "executions": 9 * 0.5,
        "execution_time": 0.2 * 1e6 * 0.00002,
        "log_and_telemetry_ingestion": 20_000 * 1e6 / 1e9 * 3.0,
    })
    assert p["per_million_orders_usd"] == pytest.approx(sum(p["parts"].values()))
    assert p["prices"]["region"] == "nowhere"


def test_quantities_come_from_the_measured_row() -> None:
    row = {"transactions": 35.0, "table_transactions": 15.0, "queue_transactions": 20.0,
           "invocations": 9.0, "log_records": 1.0, "host_log_records": 18.0, "log_bytes": 80.0}
    q = cost.quantities(row, orders_per_s=10.0, memory_mb=2048,
                        telemetry={"telemetry_items_per_order": 16.0,
                                   "telemetry_bytes_per_order": 20_000.0})
    assert q["gb_seconds"] == pytest.approx(0.2)  # 2 GB for a tenth of a second
    assert q["log_records"] == 19.0 and q["ingested_bytes"] == 20_080.0


@pytest.mark.parametrize(("change", "named"), [
    ({"gb_seconds": ...}, "missing gb_seconds"),
    ({"region": ...}, "missing region"),
    ({"ingestion_per_gb": "3"}, "not a price: ingestion_per_gb"),
    ({"executions_per_million": -1}, "not a price: executions_per_million"),
])
def test_a_prices_file_names_what_is_wrong(tmp_path: Path, change: dict[str, object],
                                           named: str) -> None:
    prices = {k: v for k, v in {**SAMPLE_PRICES, **change}.items() if v is not ...}
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(prices))
    with pytest.raises(ValueError, match=named):
        cost.load_prices(path)


def test_the_bench_reads_the_instance_size_the_bicep_deploys() -> None:
    assert instance_memory_mb() == 2048


def _prices_file(tmp_path: Path) -> Path:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(SAMPLE_PRICES))
    return path


@pytest.mark.parametrize(("report", "named"), [
    (None, "no report to price in"),
    ("{not json", "not a report"),
    (json.dumps({"transactions": [], "when": "x"}), "not a full bench report (no throughput"),
    (json.dumps([1, 2]), "not a bench report"),
    (json.dumps({"transactions": [{"workflow": "3-step", "transient_fault_rate": 0}],
                 "throughput": {"orders_per_s": 1.0}, "machine": {}, "scale": {}}),
     "cannot price this report (no 'transactions')"),
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


def test_pricing_only_needs_prices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench_main(["--price-only"])
    assert stopped.value.code == 2
    assert "--price-only needs --prices FILE" in capsys.readouterr().err


def test_the_prices_template_has_every_key_and_is_refused_until_filled_in() -> None:
    template = ROOT / "docs" / "prices.template.json"
    keys = set(json.loads(template.read_text()))
    assert keys == {*cost.UNIT_PRICES, "source", "region", "date"}
    with pytest.raises(ValueError, match="not a price: storage_transactions_per_10k"):
        cost.load_prices(template)
