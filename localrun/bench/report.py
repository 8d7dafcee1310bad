"""The bench's report: report.json, report.md (the tables, the targets and why one was
missed, the bill) and chart.png."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from localrun.bench.cost import METERS, VOLUMES, money
from localrun.bench.driver import BATCH, ROLE_NAMES, STEADY_RATE, TARGETS, Run, percentile
from localrun.metering import (
    SERVICE_BUS_STAND_IN,
)

# Busy cores above which a process counts as the limit (cpu_limit).
AZURITE_BUSY, PYTHON_BUSY = 0.9, 0.75
# Busy cores, of all the processes the bench measures, past which the machine is the limit.
MACHINE_BUSY = 0.8


def _ceiling_rates(before: dict[str, float], after: dict[str, float]) -> str:
    kinds = [("conditional_writes_per_s", "conditional table writes/s"),
             ("transactions_per_s", "entity-group transactions (two entities)/s"),
             ("point_reads_per_s", "point reads/s"), ("queue_sends_per_s", "queue sends/s"),
             ("queue_receives_1_per_s", "receives of one message/s"),
             (f"queue_receives_{BATCH}_per_s", f"receives of {BATCH}/s"),
             ("queue_deletes_per_s", "deletes/s"), ("empty_polls_per_s", "empty polls/s")]
    return ", ".join(f"{before[k]:.0f} / {after[k]:.0f} {label}" for k, label in kinds)


def ratio_by_side(tp: dict[str, Any]) -> str:
    """The ratio against the ceilings measured before and after the run, each alone."""
    sides = tp.get("ratio_to_every_request_bound_by_side")
    if not sides:  # a report from an earlier bench, priced again
        return ""
    return (f"{sides['before']:.0%} against the ceilings measured before the run alone and "
            f"{sides['after']:.0%} against those after it, so far did the machine's speed move "
            "between them; ")


def _cpu_line(tp: dict[str, Any]) -> str:
    """Which process was the limit, in the ceiling and in the run: busy cores of each."""
    c = tp["cpu_cores"]
    if "azurite" not in c["run"]:
        return "CPU: Azurite's process was not measured."
    b, run, a = c["ceiling_before"], c["run"], c["ceiling_after"]
    ms = tp["cpu_ms_per_order"]
    worker = ""
    if "worker_process" in run:
        worker = (f" and {run['worker_process']:.2f} of the worker process (the functions, the "
                  f"simulated services' included), {ms['worker_process']:.0f} ms per order")
    return (f"CPU, in busy cores of Azurite / of the bench's process (the local host, the "
            f"harness and, without a worker process, the functions: Python, one GIL): ceiling "
            f"before {b['azurite']:.2f} / {b['bench_process']:.2f}, run {run['azurite']:.2f} / "
            f"{run['bench_process']:.2f}, ceiling after {a['azurite']:.2f} / "
            f"{a['bench_process']:.2f}; per order {ms['azurite']:.0f} ms of Azurite and "
            f"{ms['bench_process']:.0f} ms of the bench's process"
            + _roles_part(tp.get("cpu_ms_per_order_by_role", {})) + worker + ". "
            + cpu_limit(run))


def _roles_part(by_role: dict[str, float]) -> str:
    if not by_role:
        return ""
    return " (" + ", ".join(f"{ROLE_NAMES.get(role, role)} {ms:.0f}"
                            for role, ms in sorted(by_role.items(), key=lambda kv: -kv[1])) + ")"


def cpu_limit(cores: dict[str, float], machine_cores: int | None = None) -> str:
    # Azurite serves from one Node.js event loop, and one GIL lets the Python process's threads
    # use about one core: near it, each is the limit.
    if cores["azurite"] >= AZURITE_BUSY:
        return "Azurite was busy near a whole core in the run: it was the limit."
    busiest = max(("worker_process", "bench_process"), key=lambda p: cores.get(p, 0.0))
    machine = machine_cores or os.cpu_count() or 1
    if cores.get(busiest, 0.0) >= PYTHON_BUSY:
        name = "the worker process" if busiest == "worker_process" else "the Python process"
        return (f"Azurite was not the limit: {name}, near one core, and the "
                f"{machine} cores it shares with Azurite were.")
    # Three processes on two cores: none gets a whole one, and all of them are still the limit.
    busy = sum(cores.values())
    if busy >= MACHINE_BUSY * machine:
        return (f"No one process was near a whole core, but together they kept {busy:.2f} of "
                f"the machine's {machine} cores busy: the cores they share were the limit, so "
                "every millisecond of CPU an order spends besides its requests (the functions' "
                "own work, the hand-offs to the worker process, the simulated services' HTTP "
                "server) is taken from the requests the bound counts.")
    return "Neither process was near a whole core in the run: the limit was elsewhere."


def write_report(out: Path, results: dict[str, Any], throughput_run: Run | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "report.md").write_text(markdown(results))
    if throughput_run is not None:
        chart(out / "chart.png", throughput_run)


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [f"# Benchmark report ({r['when']})", "",
             f"Machine: {m['cpus']} cores, {m['platform']}, Python {m['python']}; Azurite "
             "on the same machine. Scale: " + ", ".join(f"{k}={v}" for k, v in r["scale"].items()),
             "", "## Transactions per order", "",
             "| workflow | transient faults | table writes | table reads (Scheduler / "
             "Supervisor / all) | queue sends | receives | empty polls | deletes |",
             "|---|---|---|---|---|---|---|---|"]
    for t in r["transactions"]:
        lines.append(
            f"| {t['workflow']} | {t['transient_fault_rate']:.0%} | {t['table_writes']:.2f} | "
            f"{t['scheduler_table_reads']:.2f} / {t['supervisor_table_reads']:.2f} / "
            f"{t['table_reads']:.2f} | {t['queue_sends']:.2f} | {t['queue_receives']:.2f} | "
            f"{t['queue_empty_polls']:.2f} | {t['queue_deletes']:.2f} |")
    three = next(t for t in r["transactions"] if t["workflow"] == "3-step"
                 and not t["transient_fault_rate"])
    lines += ["", "Writes of the 3-step order without faults: " + ", ".join(
        f"{k} {v:.2f}" for k, v in three["write_breakdown"].items()) + ". The floor is 5 (one "
        "atomic intake, one conditional write per transition); two more are the in-flight "
        "index entry (written at intake, deleted when the order settles), which keeps a "
        "Supervisor tick independent of history; three more (merges, counted as table.write) "
        "confirm that the outboxes dispatching a step were sent, which lets the Supervisor "
        "re-send a lost request without spending the order's FailureThreshold (README, "
        "\"What follows a write\").",
        "Empty polls are the host looking at idle queues: they grow with time, not orders.",
        "Not in the table: the requests of the local host's stand-in for Service Bus (a Storage "
        "queue here, Service Bus operations in Azure), per 3-step order without faults: "
        + ", ".join(f"{k} {v:.2f}" for k, v in three[SERVICE_BUS_STAND_IN].items()) + ".", ""]
    lines += [_targets(r), "", "## Throughput and latency", ""]
    tp = r["throughput"]
    lines += [
        f"- {tp['orders']} orders, no faults, the functions in a worker process of their own "
        f"(as in Azure): **{tp['orders_per_s']:.1f} orders/s** end to end "
        f"({tp['elapsed_s']:.1f} s).",
        "- Ceiling of this Azurite, measured before and after the run (8 threads each; the "
        "bound takes each rate's mean), one client process: "
        + _ceiling_rates(r["ceiling"], tp["ceiling_after"]) + "; two client processes at once "
        "(each phase begun together): "
        + _ceiling_rates(tp["ceiling_two_processes"], tp["ceiling_after_two_processes"]) + ".",
        f"- Bound they imply for every request the run makes of Azurite, each at its kind's "
        f"better rate of one and two processes (a receive by the messages it brings; the "
        f"simulated services' own writes included, since the same Azurite serves them): "
        f"{tp['bound_every_request_orders_per_s']:.1f} orders/s, of Azurite's ms per order "
        + ", ".join(f"{k.replace('_', ' ')} {v * 1000:.1f}"
                    for k, v in tp["every_request_seconds_per_order"].items())
        + f"; achieved **{tp['ratio_to_every_request_bound']:.0%}** of it ("
        + ratio_by_side(tp) + "of one client "
        f"process's rates alone, as until 2026-11-23: {tp['bound_one_process_orders_per_s']:.1f} "
        f"orders/s, {tp['ratio_to_one_process_bound']:.0%}; of writes and "
        f"send+receive+delete cycles alone, as at first: {tp['bound_orders_per_s']:.1f} "
        f"orders/s, {tp['ratio_to_bound']:.0%}).",
        "- " + _cpu_line(tp),
        "- The functions' CPU per order, by function (the invoking thread's, SDK calls "
        "included), ms: " + ", ".join(
            f"{name} {ms:.1f}" for name, ms in tp.get("cpu_ms_per_order_by_function", {}).items())
        + ".",
        f"- Latency send → Processed, all {tp['orders']} sent at once: p50 "
        f"{tp['latency_s']['p50']:.2f} s, p95 {tp['latency_s']['p95']:.2f} s, p99 "
        f"{tp['latency_s']['p99']:.2f} s (mostly waiting in queues behind the burst).",
        f"- Latency at a steady {tp['steady_rate']:.0f} orders/s ({tp['steady_orders']} "
        f"orders): p50 {tp['steady_latency_s']['p50']:.2f} s, p95 "
        f"{tp['steady_latency_s']['p95']:.2f} s, p99 {tp['steady_latency_s']['p99']:.2f} s.",
        f"- Peak resident memory of the bench process (local host and harness): "
        f"{r['memory_peak_mb']:.0f} MB.", "", "## Supervisor cost", ""]
    s = r["supervisor"]
    lines += [
        "| store | entities read | tick time |", "|---|---|---|",
        f"| {s['expired']} expired steps | {s['before']['entities_read']} | "
        f"{s['before']['seconds'] * 1000:.0f} ms |",
        f"| + {s['completed_added']} completed orders | {s['after']['entities_read']} | "
        f"{s['after']['seconds'] * 1000:.0f} ms |",
        f"| the same, once more | {s['alone']['entities_read']} | "
        f"{s['alone']['seconds'] * 1000:.0f} ms |",
        f"| + {s['idle_in_flight']} in flight, not due | {s['with_idle']['entities_read']} | "
        f"{s['with_idle']['seconds'] * 1000:.0f} ms |", "",
        f"Ratio: entities {s['entities_ratio']:.2f}, time {s['time_ratio']:.2f} with the "
        f"completed orders; time {s['with_idle_time_ratio']:.2f} with the orders not due. The "
        "tick reads, by key range, the due-time index entries whose time has come (one query per "
        "index partition) and the state record of each, and acts on each overdue one (a write "
        "and a message). Every tick does the same work (the same orders, rescued)"
        + (f"; each time is the middle of {s['ticks']} ticks" if s.get("ticks", 1) > 1 else "")
        + ". With the completed orders: "
        + _azurite_slowed(s["before"], s["after"], s["expired"]),
        "", "## Recovery", ""]
    rc = r["recovery"]
    lines += [
        f"Agents silent for {rc['silent_rate']:.0%} of requests ({rc['orders']} orders at "
        f"{STEADY_RATE:.0f}/s, "
        f"{rc['orders_with_lost_steps']} lost at least one step, {rc['failed_orders']} failed): "
        f"time added per lost step p50 {rc['recovery_per_lost_step_s']['p50']:.1f} s, p95 "
        f"{rc['recovery_per_lost_step_s']['p95']:.1f} s, against complete-by "
        f"{rc['budget_s']} s + supervisor interval {rc['supervisor_interval_s']} s + first "
        f"backoff {rc['first_backoff_s']} s = {rc['expected_s']} s. (Measured as an order's "
        "latency minus the median latency of orders without a loss, per loss.)", ""]
    st = r.get("starvation")
    if st:
        lines += ["## A backlog while every remote call hangs", "",
                  f"{st['backlog']} orders sent while every remote call hangs past its "
                  f"{st['step_budget_s']} s budget; then for {st['window_s']:.0f} s, /health "
                  "asked every half second and the Supervisor due every second:", "",
                  "| worker threads | /health p50 | /health max | answered | Supervisor ticks "
                  "(due) |", "|---|---|---|---|---|"]
        for label in ("deployed", "worker_default"):
            x = st[label]
            lines.append(f"| {x['threads']} ({label.replace('_', ' ')}) | "
                         f"{x['health_s']['p50']:.2f} s | {x['health_s']['max']:.2f} s | "
                         f"{x['health_s']['answered']}/{x['health_s']['asked']} | "
                         f"{x['supervisor_ticks']} ({x['supervisor_ticks_due']}) |")
        lines.append("")
    li = r.get("limits")
    if li:
        lim, free = li["limited"], li["unlimited"]
        lines += ["## Limits per service", "",
                  f"{li['orders']} orders at once; the {li['service']} service answering in "
                  f"{li['latency_ms']} ms, unlimited and then limited to "
                  f"{li['limit']['at_once']} calls at once and {li['limit']['per_second']:g} a "
                  "second (`make limit-run`):", "",
                  "| | unlimited | limited |", "|---|---|---|",
                  f"| orders processed | {free['processed']} | {lim['processed']} |",
                  f"| most calls at once, as sent | {free['sent_peak_at_once']} | "
                  f"{lim['sent_peak_at_once']} |",
                  f"| most grants in one second | - | "
                  f"{lim['granted_most_begun_in_a_second']} |",
                  f"| most calls sent in one second | {free['sent_most_begun_in_a_second']} | "
                  f"{lim['sent_most_begun_in_a_second']} |",
                  f"| most calls the simulated service took in one second | "
                  f"{free['service_most_begun_in_a_second']} | "
                  f"{lim['service_most_begun_in_a_second']} |",
                  f"| Agent's table reads + writes per call | "
                  f"{free['agent_table_reads_per_call']:.2f} + "
                  f"{free['agent_table_writes_per_call']:.2f} | "
                  f"{lim['agent_table_reads_per_call']:.2f} + "
                  f"{lim['agent_table_writes_per_call']:.2f} |",
                  f"| backlog settled in | {free['elapsed_s']:.1f} s | {lim['elapsed_s']:.1f} s |",
                  "", f"The limit cost {li['limit_transactions_per_call']:.2f} storage "
                  "transactions per call. One second is any second (a sliding window).", ""]
    three = next(t for t in r["transactions"] if t["workflow"] == "3-step"
                 and not t["transient_fault_rate"])
    if "log_records" in three:
        lines += ["## Log records per order", "",
                  f"3-step order without faults: {three['log_records']:.1f} records "
                  f"({three['log_bytes']:.0f} bytes of message) from the app, as the worker would "
                  f"forward them, plus about {three['host_log_records']:.0f} from the host "
                  f"(Executing/Executed for {three['invocations']:.1f} invocations). By logger: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in three["log_records_by_logger"].items())
                  + ".", ""]
    lb = r.get("latency_breakdown")
    if lb:
        lines += ["## Latency, hop by hop", "",
                  f"{lb['orders']} orders at {lb['rate']:.0f}/s that went straight through; "
                  f"median seconds per hop (send -> Processed median {lb['median_s']['total']:.2f}"
                  f" s: queue waits {lb['queue_waits_s']:.2f} s, functions "
                  f"{lb['functions_s']:.2f} s, remote calls inside the Agents):", "",
                  "| hop | median s |", "|---|---|",
                  *[f"| {k} | {v:.3f} |" for k, v in lb["median_s"].items() if k != "total"],
                  ""]
    tr = r.get("tracing")
    if tr:
        sec = tr["seconds_per_order"]
        lines += ["## Tracing", "",
                  f"One trace per order, {tr['orders']} fault-free 3-step orders: "
                  f"{tr['spans_per_order']:.1f} spans and {tr['span_events_per_order']:.1f} span "
                  f"events per order, so about {tr['telemetry_items_per_order']:.0f} Application "
                  "Insights items per order with the Azure Monitor exporter (plus "
                  f"{tr['sender_and_service_spans_per_order']:.0f} from the sender and the "
                  "simulated services). "
                  f"Time per order in a batch: {sec['off'] * 1000:.0f} ms untraced, "
                  f"{sec['on'] * 1000:.0f} ms traced ({tr['overhead']:+.0%}). Spans per order: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in tr["spans_by_name_per_order"].items())
                  + ".", ""]
    lines += cost_markdown(r.get("cost"))
    if r.get("notes"):
        lines += ["## Notes", "", *[f"- {n}" for n in r["notes"]], ""]
    return "\n".join(lines)




def cost_markdown(co: dict[str, Any] | None) -> list[str]:
    """The report's section on what an order costs: the quantities per order, the bill by meter
    at 1M, 10M and 100M orders a month, and the idle app's day."""
    if not co or "priced" not in co:
        return []
    labels = list(co["quantities_per_order"])
    q = co["quantities_per_order"]
    lines = ["## What an order costs", "",
             "Per order, what Azure bills (execution time estimated for instances of "
             f"{co['instance_memory_mb']} MB busy at this run's throughput; empty polls are in "
             "the idle cost below):", "",
             "| per order | " + " | ".join(labels) + " |",
             "|---|" + "---|" * len(labels),
             *[f"| {k.replace('_', ' ')} | " + " | ".join(f"{q[lb][k]:.4g}" for lb in labels)
               + " |" for k in q[labels[0]]], ""]
    first = str(VOLUMES[0])
    totals = {lb: co["priced"][lb]["by_volume"][first]["total_per_million_orders_usd"]
              for lb in labels}
    return lines + bill_markdown(co, labels[0]) + [
        "Every row at 1M orders a month, total per million orders: "
        + "; ".join(f"{lb} {money(v)}" for lb, v in totals.items()) + ".", ""]


def bill_markdown(co: dict[str, Any], label: str) -> list[str]:
    """The bill by meter of one row of the report, $ per million orders at each volume, and
    the idle day: the table docs/bill.md shows."""
    p = co["priced"][label]
    pr = p["prices"]
    vols = [str(v) for v in VOLUMES]
    head = " | ".join(f"{int(v) // 1_000_000}M orders/month" for v in vols)
    by = p["by_volume"]
    lines = [f"$ per million orders by meter ({label}), at the prices of {pr['date']} "
             f"({pr['region'].split(' (')[0]}; sources: docs/azure-prices.json). Fixed costs "
             "(the Service Bus base, the idle app) are shared among the month's orders:", "",
             f"| meter | {head} |", "|---|" + "---:|" * len(vols)]
    for key, name in METERS.items():
        lines.append(f"| {name} | " + " | ".join(
            money(by[v]["per_million_orders_usd"][key]) for v in vols) + " |")
    g = pr["free_grants_per_month"]
    lines += [
        "| **before the free grants** | " + " | ".join(
            f"**{money(by[v]['gross_per_million_orders_usd'])}**" for v in vols) + " |",
        f"| free grants ({g['flex_executions']:,} executions, {g['flex_gb_seconds']:,} GB-s, "
        f"{g['ingestion_gb']} GB ingestion a month) | " + " | ".join(
            money(by[v]["free_grants_per_million_orders_usd"]) for v in vols) + " |",
        "| **total** | " + " | ".join(
            f"**{money(by[v]['total_per_million_orders_usd'])}**" for v in vols) + " |", ""]
    idle, d = p["idle_per_day_usd"], co["idle_per_day"]
    ticks = sum(v for k, v in idle.items() if k.startswith("supervisor_tick"))
    tick = ("measured" if d["tick_measured"] else "estimated: a report without a measured "
            "idle tick")
    lines += [
        f"Idle, a deployed app with no orders: **{money(p['idle_total_per_day_usd'])} a day** "
        f"before the free grants: {d['storage_queues']} Storage queues polled every "
        f"{d['max_polling_interval_s']:g} s (host.json maxPollingInterval), "
        f"{d['empty_polls']:,.0f} empty polls {money(idle['queue_empty_polls'])}; "
        f"{d['ticks']:,.0f} Supervisor ticks (every {d['supervisor_interval_s']:g} s) of "
        f"{d['tick_table_transactions']:.0f} table transactions and "
        f"{d['tick_seconds'] * 1000:.0f} ms each ({tick}) "
        f"{money(ticks)}; "
        f"the Service Bus base {money(idle['service_bus_base'])} (its "
        f"{d['service_bus_operations']:,.0f} empty receives a day, estimated, are inside the "
        "included operations).",
        "Service Bus operations per order are counted as the local stand-in makes them "
        "(receives, completes, lock renewals), plus the submitter's send; one rate beyond the "
        "included operations (the 13M-100M band's), an upper bound past 100M a month.", ""]
    return lines


def _targets(r: dict[str, Any]) -> str:
    latency_target = (f"send → Processed p50 at {STEADY_RATE:g} orders/s ≤ "
                      f"{TARGETS['steady_p50_s']} s")
    three = next(t for t in r["transactions"] if t["workflow"] == "3-step"
                 and not t["transient_fault_rate"])
    checks = [
        (f"table writes ≤ {TARGETS['table_writes']} (besides the Supervisor's tick log)",
         three["table_writes"] - three["supervisor_table_writes"] <= TARGETS["table_writes"]),
        ("Scheduler table reads ≤ 4", three["scheduler_table_reads"]
         <= TARGETS["scheduler_table_reads"]),
        ("queue messages sent ≤ 7", three["queue_sends"] <= TARGETS["queue_sends"]),
        ("throughput ≥ 80% of the ceiling", r["throughput"]["ratio_to_every_request_bound"]
         >= TARGETS["throughput_ratio"]),
        ("Supervisor: 10,000 completed change tick time ≤ 1.2x", r["supervisor"]["time_ratio"]
         <= TARGETS["tick_time_ratio"]),
        ("Supervisor: with 10,000 in flight not due, entities per tick ≤ 2 x overdue + 10",
         r["supervisor"]["with_idle"]["entities_read"]
         <= 2 * r["supervisor"]["expired"] + TARGETS["entities_beyond_overdue"]),
        ("Supervisor: 10,000 in flight not due change tick time ≤ 1.2x",
         r["supervisor"]["with_idle_time_ratio"] <= TARGETS["tick_time_ratio"]),
        (latency_target, r["throughput"]["steady_latency_s"]["p50"] <= TARGETS["steady_p50_s"]),
    ]
    lines = ["Targets: " + "; ".join(f"{name}: {'met' if ok else '**missed**'}"
                                     for name, ok in checks) + "."]
    tp, sup = r["throughput"], r["supervisor"]
    sides = ratio_by_side(tp).removesuffix("; ")
    why = {
        "throughput ≥ 80% of the ceiling": (
            f"Throughput reached {tp['ratio_to_every_request_bound']:.0%} of a bound that counts "
            "every request an order makes at the better rate this Azurite served one client "
            "process and two at once (the app is two: the host's and the worker's"
            + (f"; {sides}" if sides else "") + "); "
            f"{tp['ratio_to_one_process_bound']:.0%} of one process's rates alone. "
            + _cpu_line(tp)),
        "Supervisor: 10,000 in flight not due change tick time ≤ 1.2x": (
            f"Entities read did not change ({sup['alone']['entities_read']} → "
            f"{sup['with_idle']['entities_read']}), nor did any request; the time did "
            f"({sup['with_idle_time_ratio']:.2f}x). "
            + _azurite_slowed(sup["alone"], sup["with_idle"], sup["expired"])),
        "Supervisor: 10,000 completed change tick time ≤ 1.2x": (
            f"Entities read did not change ({sup['before']['entities_read']} → "
            f"{sup['after']['entities_read']}), nor did any request; the time did "
            f"({sup['time_ratio']:.2f}x). "
            + _azurite_slowed(sup["before"], sup["after"], sup["expired"])),
    }
    lb = r.get("latency_breakdown") or {}
    if lb.get("median_s"):
        waits = [k for k in lb["median_s"] if "wait" in k]
        why[latency_target] = (
            f"p50 {r['throughput']['steady_latency_s']['p50']:.2f} s. Of the straight path's "
            f"{lb['median_s']['total']:.2f} s, {lb['queue_waits_s']:.2f} s is waiting in "
            f"{len(waits)} queues (Service Bus and the Storage queues the host polls) and "
            f"{lb['functions_s']:.2f} s is the functions themselves: with no queue wait at all "
            f"it would be about {lb['median_s']['total'] - lb['queue_waits_s']:.2f} s. Tried: "
            "intake takes the order to its first step in its own invocation (one queue fewer); "
            "the Agents reply on an output binding, which wakes the Scheduler's listener as the "
            "Functions host's shared queue watcher does. Left: each request to an Agent waits "
            "for that Agent's listener to poll, because the relay sends it and then confirms "
            "it (the Supervisor's proof that it was sent), which an output binding, sent after "
            "the function returns, cannot give; polling faster would cost transactions while "
            "idle (README, Performance).")
    lines += [f"- Missed: {why.get(name, name)}" for name, ok in checks if not ok]
    return "\n".join(lines)


def _azurite_slowed(a: dict[str, Any], b: dict[str, Any], reads: int) -> str:
    """Why the same tick took longer with more in the tables: the emulator's own times for the
    same requests, before and after, with the control that shows where its time went."""
    def ms(tick: dict[str, Any], key: str) -> str:
        return f"{tick[key] * 1000:.0f}"

    text = (f"Azurite's own point reads of the same {reads} records went from "
            f"{ms(a, 'azurite_point_reads_s')} to {ms(b, 'azurite_point_reads_s')} ms and "
            f"the tick's range queries from {ms(a, 'azurite_due_queries_s')} to "
            f"{ms(b, 'azurite_due_queries_s')} ms. ")
    if "azurite_control_reads_s" not in a:  # a report from a bench before the control
        return text + "The emulator scans where Table Storage seeks by key."
    return text + (
        "Azurite finds an entity through its row-key index and then scans every entity "
        f"that shares the row key, and every state record's row key is \"state\": {reads} "
        "reads of entities in the same table, each with a row key of its own, took "
        f"{ms(a, 'azurite_control_reads_s')} and {ms(b, 'azurite_control_reads_s')} ms. Its "
        "range queries filter the whole table. Table Storage seeks both by key: the tick's "
        "work is the same.")


def chart(path: Path, run: Run) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    if run.completions:
        width = max(1, int(run.completions[-1]) + 1)
        a.hist(run.completions, bins=width, color="#2b6cb0")
    a.set_title(f"Throughput: orders settled per second ({run.orders} orders)")
    a.set_xlabel("seconds since the first order was sent")
    a.set_ylabel("orders")
    lat = sorted(run.latencies())
    if lat:
        b.plot(lat, [i / len(lat) for i in range(1, len(lat) + 1)], color="#2f855a")
        for p in (50, 95, 99):
            b.axvline(percentile(lat, p), linestyle="--", linewidth=0.8, color="grey")
            b.text(percentile(lat, p), 0.05, f"p{p}", rotation=90)
    b.set_title("Latency, send → Processed (CDF)")
    b.set_xlabel("seconds")
    b.set_ylabel("fraction of orders")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


