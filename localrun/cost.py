"""What an order costs: the bill of quantities the benchmark measured, and, given unit prices,
the price of a million orders.

The quantities are what Azure bills: storage transactions (every table and queue request is
one), Service Bus operations, function executions, execution time in GB-seconds, and the log
and telemetry volume Application Insights ingests. The prices are not in this repository: they
change, differ by region and agreement, and must be cited with where and when they were read.
Put them in a JSON file (``--prices``) with the keys of ``UNIT_PRICES`` in US dollars, plus
``source``, ``region`` and ``date``. Free grants are left out: at a million orders they are small.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# One order through intake and three steps: the send (by the sender), the trigger's receive and
# its complete. The local stand-in for Service Bus is not metered; this is the design's count.
SERVICE_BUS_OPERATIONS_PER_ORDER = 3

# What each price in a prices file is for, and the unit it is per.
UNIT_PRICES = {
    "storage_transactions_per_10k": "storage transactions (table and queue requests), per 10,000",
    "service_bus_operations_per_million": "Service Bus Standard operations, per million",
    "executions_per_million": "Flex Consumption on-demand executions, per million",
    "gb_seconds": "Flex Consumption on-demand execution time, per GB-second",
    "ingestion_per_gb": "Log Analytics / Application Insights ingestion, per GB",
}


def quantities(tx: dict[str, Any], orders_per_s: float, memory_mb: int,
               telemetry: dict[str, Any] | None) -> dict[str, float]:
    """Per order, from a transactions row (bench.per_order), the throughput of one local host
    (standing in for one instance, busy throughout), the instance memory size the Bicep
    deploys, and the tracing scenario's telemetry."""
    logs = tx.get("log_bytes", 0.0)  # the host's own two records per invocation: not measured
    items = telemetry or {}
    return {
        "storage_transactions": tx["transactions"],
        "table_transactions": tx["table_transactions"],
        "queue_transactions": tx["queue_transactions"],
        "service_bus_operations": SERVICE_BUS_OPERATIONS_PER_ORDER,
        "executions": tx.get("invocations", 0.0),
        # Flex Consumption bills an instance's memory while it is executing: busy all the time
        # under load, an instance handles orders_per_s orders in each second it is billed for.
        "gb_seconds": memory_mb / 1024 / orders_per_s if orders_per_s else float("nan"),
        "log_records": tx.get("log_records", 0.0) + tx.get("host_log_records", 0.0),
        "telemetry_items": items.get("telemetry_items_per_order", 0.0),
        "ingested_bytes": logs + items.get("telemetry_bytes_per_order", 0.0),
    }


def load_prices(path: Path) -> dict[str, Any]:
    try:
        prices = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"--prices {path}: {e}") from None
    missing = [k for k in (*UNIT_PRICES, "source", "region", "date") if k not in prices]
    if missing:
        raise ValueError(f"--prices {path}: missing {', '.join(missing)} (see localrun/cost.py)")
    bad = [k for k in UNIT_PRICES if not isinstance(prices[k], int | float) or prices[k] < 0]
    if bad:
        raise ValueError(f"--prices {path}: not a price: {', '.join(bad)}")
    return prices


def priced(q: dict[str, float], prices: dict[str, Any]) -> dict[str, Any]:
    """A million orders at these prices: the total and each part, in the prices' currency."""
    m = 1_000_000
    parts = {
        "storage_transactions": q["storage_transactions"] * m / 10_000
        * prices["storage_transactions_per_10k"],
        "service_bus": q["service_bus_operations"] * prices["service_bus_operations_per_million"],
        "executions": q["executions"] * prices["executions_per_million"],
        "execution_time": q["gb_seconds"] * m * prices["gb_seconds"],
        "log_and_telemetry_ingestion": q["ingested_bytes"] * m / 1e9 * prices["ingestion_per_gb"],
    }
    return {"per_million_orders_usd": sum(parts.values()), "parts": parts,
            "prices": {k: prices[k] for k in ("source", "region", "date", *UNIT_PRICES)}}
