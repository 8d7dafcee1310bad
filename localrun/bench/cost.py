"""What an order costs: the bill of quantities the benchmark measured, priced by meter.

The quantities are what Azure bills: table and queue transactions (priced apart: a queue request
costs about 11 times a table one), Service Bus operations, Flex Consumption executions and
execution time in GB-seconds, and the log and telemetry volume Application Insights ingests.

The prices are the repository's own copy, docs/azure-prices.json (each figure with where and
when it was read), unless ``--prices FILE`` names others with the same keys
(docs/prices.template.json). A bill has two kinds of line: what grows with orders (per order,
from the bench's counts) and what a deployed app costs with no orders at all (idle: the host polling
each Storage queue at host.json's ``maxPollingInterval``, the Supervisor's timer ticks, the
Service Bus namespace's base charge). At a monthly volume the fixed part is shared among the
orders and the free grants are taken off, as a separate line: so $ per million orders differs
at 1M, 10M and 100M orders a month.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_PRICES = ROOT / "docs" / "azure-prices.json"

# Orders a month at which the bill is stated.
VOLUMES = (1_000_000, 10_000_000, 100_000_000)
DAYS_PER_MONTH = 730 / 24  # Azure prices a month as 730 hours
SECONDS_PER_DAY = 86_400

# The one Service Bus operation per order the bench does not see: the submitter's send (the bench
# sends through the local stand-in with a client of its own, outside the meter).
SERVICE_BUS_SENDS_PER_ORDER = 1
# The Service Bus trigger's receive loop waits up to a minute for a message (the SDK's default
# max wait); an empty queue costs one operation per wait. Not observable locally, where a Storage
# queue stands in for Service Bus and is polled instead: an estimate, and said so.
SERVICE_BUS_IDLE_RECEIVE_SECONDS = 60.0
# A Supervisor tick on an empty store when the bench did not measure one (a report from an
# earlier bench): the tick log read, one range query per due-index partition (16) and the legacy
# one, the tick log write.
ESTIMATED_IDLE_TICK_TABLE_TRANSACTIONS = 19
ESTIMATED_IDLE_TICK_SECONDS = 0.1

# What each price in a prices file is for, and the unit it is per.
UNIT_PRICES = {
    "table_transactions_per_10k": "Table Storage transactions (every table request), per 10,000",
    "queue_transactions_per_10k": "Queue Storage transactions (every queue request), per 10,000",
    "service_bus_standard_base_per_month": "Service Bus Standard namespace, per month",
    "service_bus_included_operations_per_month": "Service Bus operations the base includes",
    "service_bus_operations_per_million": "Service Bus operations beyond those, per million",
    "executions_per_million": "Flex Consumption on-demand executions, per million",
    "gb_seconds": "Flex Consumption on-demand execution time, per GB-second",
    "ingestion_per_gb": "Log Analytics / Application Insights ingestion, per GB",
}
FREE_GRANTS = {
    "flex_gb_seconds": "Flex Consumption GB-seconds free a month (per subscription)",
    "flex_executions": "Flex Consumption executions free a month (per subscription)",
    "ingestion_gb": "GB of log ingestion free a month",
}
ABOUT = ("source", "region", "date")

# The bill's lines, in the order the table shows them.
METERS = {
    "table_transactions": "Table transactions",
    "queue_transactions": "Queue transactions",
    "service_bus_operations": "Service Bus operations beyond the included",
    "service_bus_base": "Service Bus Standard base",
    "executions": "Flex executions",
    "gb_seconds": "Flex execution time (GB-s)",
    "ingestion": "Telemetry and log ingestion",
}


def quantities(tx: dict[str, Any], orders_per_s: float, memory_mb: int,
               telemetry: dict[str, Any] | None) -> dict[str, float]:
    """Per order, from a transactions row (bench.per_order), the throughput of one local host
    (standing in for one instance, busy throughout), the instance memory size the Bicep
    deploys, and the tracing scenario's telemetry.

    Empty polls are left out: the host polls idle queues whatever the orders (the idle cost)."""
    logs = tx.get("log_bytes", 0.0)  # the host's own two records per invocation: not measured
    items = telemetry or {}
    sb = tx.get("local_service_bus", {})
    empty = tx.get("queue_empty_polls", 0.0)
    return {
        "table_transactions": tx["table_transactions"],
        "queue_transactions": tx["queue_transactions"] - empty,
        # As the SDK makes them, observed on the local stand-in: receives that brought messages,
        # completes (deletes), lock renewals (visibility updates); and the submitter's send.
        "service_bus_receives": sb.get("receive", 0.0),
        "service_bus_completes": sb.get("delete", 0.0),
        "service_bus_lock_renewals": sb.get("update", 0.0),
        "service_bus_sends": float(SERVICE_BUS_SENDS_PER_ORDER),
        "service_bus_operations": (SERVICE_BUS_SENDS_PER_ORDER + sb.get("receive", 0.0)
                                   + sb.get("delete", 0.0) + sb.get("update", 0.0)),
        "executions": tx.get("invocations", 0.0),
        # Flex Consumption bills an instance's memory while it is executing: busy all the time
        # under load, an instance handles orders_per_s orders in each second it is billed for.
        "gb_seconds": memory_mb / 1024 / orders_per_s if orders_per_s else float("nan"),
        "log_records": tx.get("log_records", 0.0) + tx.get("host_log_records", 0.0),
        "telemetry_items": items.get("telemetry_items_per_order", 0.0),
        # What the default ingests: a sampled share of fault-free orders' traces (the bench
        # measures both; full fidelity is OrderTraceSampleRatio=1).
        "ingested_bytes": logs + items.get("telemetry_bytes_per_order_sampled",
                                           items.get("telemetry_bytes_per_order", 0.0)),
    }


def idle_quantities(queues: int, max_polling_s: float, tick_interval_s: float,
                    tick: dict[str, Any] | None, memory_mb: int) -> dict[str, Any]:
    """A deployed app with no orders, per day: the host polls each Storage queue at
    ``max_polling_s`` (the ceiling of its back-off, where an idle queue stays); the Supervisor
    ticks every ``tick_interval_s`` (one execution, its requests, its time); the Service Bus
    trigger waits on the orders queue. ``tick`` is the bench's metered idle tick (its requests
    and seconds), if it measured one."""
    ticks = SECONDS_PER_DAY / tick_interval_s
    if tick:
        tick_tables = float(sum(n for k, n in tick["requests"].items()
                                if k.startswith("table.")))
        tick_seconds, measured = float(tick["seconds"]), True
    else:
        tick_tables = float(ESTIMATED_IDLE_TICK_TABLE_TRANSACTIONS)
        tick_seconds, measured = ESTIMATED_IDLE_TICK_SECONDS, False
    return {
        "storage_queues": queues, "max_polling_interval_s": max_polling_s,
        "supervisor_interval_s": tick_interval_s, "tick_measured": measured,
        "tick_table_transactions": tick_tables, "tick_seconds": tick_seconds,
        "empty_polls": queues * SECONDS_PER_DAY / max_polling_s,
        "ticks": ticks,
        "table_transactions": ticks * tick_tables,
        "queue_transactions": queues * SECONDS_PER_DAY / max_polling_s,
        "executions": ticks,
        "gb_seconds": ticks * tick_seconds * memory_mb / 1024,
        # Estimated (the stand-in is a polled Storage queue): one empty receive per wait.
        "service_bus_operations": SECONDS_PER_DAY / SERVICE_BUS_IDLE_RECEIVE_SECONDS,
    }


def load_prices(path: Path | None = None) -> dict[str, Any]:
    """A prices file (the shipped one without a path), every price present and a number."""
    path = path or SHIPPED_PRICES
    flag = "prices" if path == SHIPPED_PRICES else f"--prices {path}"
    try:
        prices = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{flag}: {e}") from None
    if not isinstance(prices, dict):
        raise ValueError(f"{flag}: not a prices file (see docs/prices.template.json)")
    grants = prices.get("free_grants_per_month")
    missing = [k for k in (*UNIT_PRICES, *ABOUT, "free_grants_per_month") if k not in prices]
    if isinstance(grants, dict):
        missing += [f"free_grants_per_month.{k}" for k in FREE_GRANTS if k not in grants]
    elif grants is not None:
        missing.append("free_grants_per_month (an object)")
    if missing:
        raise ValueError(f"{flag}: missing {', '.join(missing)} "
                         "(see docs/prices.template.json)")
    assert isinstance(grants, dict)  # a missing or other value is named above
    bad = [k for k in UNIT_PRICES if not _number(prices[k])]
    bad += [f"free_grants_per_month.{k}" for k in FREE_GRANTS if not _number(grants[k])]
    if bad:
        raise ValueError(f"{flag}: not a price: {', '.join(bad)}")
    return prices


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0


def _month(per_order: dict[str, float], idle_day: dict[str, Any],
           orders: float) -> dict[str, float]:
    """Each meter's quantity in a month of ``orders`` orders, the idle app's included."""
    idle = {k: idle_day[k] * DAYS_PER_MONTH for k in (
        "table_transactions", "queue_transactions", "executions", "gb_seconds",
        "service_bus_operations")}
    return {
        "table_transactions": per_order["table_transactions"] * orders + idle["table_transactions"],
        "queue_transactions": per_order["queue_transactions"] * orders + idle["queue_transactions"],
        "service_bus_operations": (per_order["service_bus_operations"] * orders
                                   + idle["service_bus_operations"]),
        "executions": per_order["executions"] * orders + idle["executions"],
        "gb_seconds": per_order["gb_seconds"] * orders + idle["gb_seconds"],
        "ingested_gb": per_order["ingested_bytes"] * orders / 1e9,
    }


def bill(q: dict[str, float], idle_day: dict[str, Any], prices: dict[str, Any],
         orders: float) -> dict[str, Any]:
    """A month of ``orders`` orders at these prices, by meter: dollars for the month and per
    million orders, the free grants a separate (negative) line."""
    m = _month(q, idle_day, orders)
    included = prices["service_bus_included_operations_per_month"]
    # One rate beyond the included operations: the 13M-100M band's. Above 100M operations a
    # month Service Bus charges less (see the prices' notes), so past that this is an upper bound.
    month = {
        "table_transactions": m["table_transactions"] / 10_000
        * prices["table_transactions_per_10k"],
        "queue_transactions": m["queue_transactions"] / 10_000
        * prices["queue_transactions_per_10k"],
        "service_bus_operations": max(0.0, m["service_bus_operations"] - included) / 1e6
        * prices["service_bus_operations_per_million"],
        "service_bus_base": prices["service_bus_standard_base_per_month"],
        "executions": m["executions"] / 1e6 * prices["executions_per_million"],
        "gb_seconds": m["gb_seconds"] * prices["gb_seconds"],
        "ingestion": m["ingested_gb"] * prices["ingestion_per_gb"],
    }
    g = prices["free_grants_per_month"]
    grants = -(min(m["executions"], g["flex_executions"]) / 1e6 * prices["executions_per_million"]
               + min(m["gb_seconds"], g["flex_gb_seconds"]) * prices["gb_seconds"]
               + min(m["ingested_gb"], g["ingestion_gb"]) * prices["ingestion_per_gb"])
    gross = sum(month.values())
    per_m = 1e6 / orders
    return {"orders_per_month": orders, "quantities_per_month": m,
            "month_usd": month, "gross_month_usd": gross,
            "free_grants_month_usd": grants, "total_month_usd": gross + grants,
            "per_million_orders_usd": {k: v * per_m for k, v in month.items()},
            "gross_per_million_orders_usd": gross * per_m,
            "free_grants_per_million_orders_usd": grants * per_m,
            "total_per_million_orders_usd": (gross + grants) * per_m}


def idle_bill(idle_day: dict[str, Any], prices: dict[str, Any]) -> dict[str, float]:
    """A deployed app with no orders, dollars a day by meter (before the free grants, which
    cover its executions and GB-s: see the monthly bill)."""
    return {
        "queue_empty_polls": idle_day["queue_transactions"] / 10_000
        * prices["queue_transactions_per_10k"],
        "supervisor_tick_table_transactions": idle_day["table_transactions"] / 10_000
        * prices["table_transactions_per_10k"],
        "supervisor_tick_executions": idle_day["executions"] / 1e6
        * prices["executions_per_million"],
        "supervisor_tick_gb_seconds": idle_day["gb_seconds"] * prices["gb_seconds"],
        "service_bus_base": prices["service_bus_standard_base_per_month"] / DAYS_PER_MONTH,
        # Its empty receives are well inside the included operations.
        "service_bus_empty_receives": 0.0,
    }


def priced(q: dict[str, float], idle_day: dict[str, Any],
           prices: dict[str, Any]) -> dict[str, Any]:
    """The bill at each of VOLUMES, the idle day, and the prices they were read at."""
    idle = idle_bill(idle_day, prices)
    return {"by_volume": {str(v): bill(q, idle_day, prices, v) for v in VOLUMES},
            "idle_per_day_usd": idle, "idle_total_per_day_usd": sum(idle.values()),
            "prices": {k: prices[k] for k in (*ABOUT, *UNIT_PRICES, "free_grants_per_month")},
            "prices_sources": [s.get("where", "") for s in prices.get("sources", [])
                               if isinstance(s, dict)]}


def max_polling_seconds(host_json: dict[str, Any]) -> float:
    """host.json's extensions.queues.maxPollingInterval, in seconds (the host's default, one
    minute, if it is not set)."""
    text = host_json.get("extensions", {}).get("queues", {}).get("maxPollingInterval")
    if text is None:
        return 60.0
    m = re.fullmatch(r"(?:(\d+)\.)?(\d+):(\d+):(\d+(?:\.\d+)?)", str(text))
    if m is None:
        raise ValueError(f"host.json: maxPollingInterval {text!r} is not hh:mm:ss")
    d, h, mi, s = m.groups()
    return ((int(d or 0) * 24 + int(h)) * 60 + int(mi)) * 60 + float(s)


def money(v: float) -> str:
    if math.isnan(v):
        return "n/a"
    return f"-${-v:,.2f}" if v < 0 else f"${v:,.2f}"


def instance_memory_mb() -> int:
    """The instance memory size the Bicep deploys (infra/main.bicep)."""
    bicep = (ROOT / "infra" / "main.bicep").read_text()
    m = re.search(r"param instanceMemoryMB int = (\d+)", bicep)
    if m is None:
        raise RuntimeError("infra/main.bicep no longer declares instanceMemoryMB with a default")
    return int(m.group(1))


def storage_queues() -> int:
    """The Storage queues a deployed app's host polls: the Scheduler's two (its commands and the
    Agents' replies) and one per registered service (infra/services.json, which the Bicep
    creates them from)."""
    services = json.loads((ROOT / "infra" / "services.json").read_text())
    return 2 + len(services["queues"])


def supervisor_interval_s() -> float:
    """Seconds between the Supervisor's ticks at the app's default SupervisorSchedule."""
    from shared.settings import Settings, schedule_interval

    default = Settings.model_fields["supervisor_schedule"].default
    return schedule_interval(str(default))


def report_cost(r: dict[str, Any], prices: dict[str, Any]) -> dict[str, Any]:
    """The bill of a bench report: its 3-step rows' quantities per order, the idle day, and
    both priced at each of VOLUMES."""
    memory = instance_memory_mb()
    rows = {("3-step" + (", 20% transient faults" if t["transient_fault_rate"] else "")): t
            for t in r["transactions"] if t["workflow"] == "3-step"}
    q = {label: quantities(t, r["throughput"]["orders_per_s"], memory, r.get("tracing"))
         for label, t in rows.items()}
    idle = idle_quantities(storage_queues(),
                           max_polling_seconds(json.loads((ROOT / "host.json").read_text())),
                           supervisor_interval_s(),
                           (r.get("supervisor") or {}).get("idle_tick"), memory)
    return {"instance_memory_mb": memory, "quantities_per_order": q, "idle_per_day": idle,
            "priced": {label: priced(v, idle, prices) for label, v in q.items()}}
