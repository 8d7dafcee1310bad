"""The rolling rehearsal's verdict (rolling.py): what it checks once the orders have settled,
the simulated services' ledger audited against the orders' records, and the summary it prints."""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from localrun.rolling.store import Store, is_settled
from localrun.rolling.traffic import DIGITAL, Resubmitter, Sender, ServiceProxy


@dataclass
class Verdict:
    problems: dict[str, list[str]] = field(default_factory=dict)

    def fail(self, check: str, detail: str) -> None:
        self.problems.setdefault(check, []).append(detail)

    @property
    def ok(self) -> bool:
        return not self.problems


def _steps(s: Mapping[str, Any]) -> list[dict[str, Any]]:
    try:
        steps = json.loads(s.get("Steps") or "[]")
    except ValueError:
        return []
    return steps if isinstance(steps, list) else []


def brief(s: Mapping[str, Any] | None) -> str:
    """An order's record at a glance: for the report of a failed check."""
    if s is None:
        return "no state record"
    steps = ", ".join(f"{st.get('name')}={st.get('status')}#{st.get('attempt')}"
                      f"{'(in doubt)' if st.get('in_doubt') else ''}" for st in _steps(s))
    fields = {k: s.get(k) for k in ("ProcessState", "Compensation", "CurrentStep",
                                    "FailureCount", "LockedBy", "CompleteBy", "UpdatedAt",
                                    "SchemaVersion", "Workflow", "LastError")}
    return json.dumps({**{k: str(v) if isinstance(v, datetime) else v
                          for k, v in fields.items() if v not in (None, "")},
                       "Steps": steps}, default=str)[:1200]


def audit_ledger(states: Mapping[str, Mapping[str, Any]], effects: Sequence[Mapping[str, Any]],
                 alerts: Sequence[Mapping[str, Any]], verdict: Verdict) -> Counter[str]:
    """The simulated services' ledger (one row per do key: applied, undone or voided) against
    the orders' settled records: no work done twice, a processed order's effects standing
    once, a compensated order's undone. Returns the ledger's rows by status."""
    by_order: dict[str, list[Mapping[str, Any]]] = {}
    for e in effects:
        by_order.setdefault(str(e.get("OrderID", "")), []).append(e)
    unknown = sorted(set(by_order) - set(states))
    for oid in unknown:
        verdict.fail("work for an order nobody sent",
                     f"{oid}: {[e['RowKey'] for e in by_order[oid]]}")
    failed_steps: dict[str, set[str]] = {}
    for a in alerts:
        if a.get("Kind") == "CompensationFailed":
            failed_steps.setdefault(str(a.get("OrderID")), set()).add(str(a.get("Step") or ""))
    order_failed = {str(a.get("OrderID")) for a in alerts if a.get("Kind") == "OrderFailed"}
    for oid, s in states.items():
        if not is_settled(s):
            continue  # reported as unsettled
        rows: dict[str, list[Mapping[str, Any]]] = {}
        for e in by_order.get(oid, []):
            step = str(e["RowKey"]).removeprefix(f"{oid}.").split(".")[0]
            rows.setdefault(step, []).append(e)
        steps = {str(st.get("name")): st for st in _steps(s)}
        for step, rs in rows.items():
            applied = [r["RowKey"] for r in rs if r.get("Status") == "applied"]
            if len(applied) > 1:
                verdict.fail("work done twice", f"{oid} {step}: applied under {applied}; "
                                                f"record {brief(s)}")
            if step not in steps:
                verdict.fail("work for a step the order does not have",
                             f"{oid} {step}: {[r['RowKey'] for r in rs]}")
        if s["ProcessState"] == "Processed":
            for name, st in steps.items():
                applied = [r for r in rows.get(name, []) if r.get("Status") == "applied"]
                key = st.get("work_key")
                if len(applied) != 1:
                    verdict.fail("a processed order's work not standing once",
                                 f"{oid} {name}: ledger "
                                 f"{[(r['RowKey'], r.get('Status')) for r in rows.get(name, [])]}"
                                 f"; record {brief(s)}")
                elif key and applied[0]["RowKey"] != key:
                    verdict.fail("a processed order's work under another key",
                                 f"{oid} {name}: applied {applied[0]['RowKey']}, recorded {key}")
            continue
        if oid not in order_failed and s["ProcessState"] != "Cancelled":
            verdict.fail("a failed order with no OrderFailed alert", f"{oid}: {brief(s)}")
        alerted = failed_steps.get(oid, set())
        # A compensation stops at the step whose undo failed, with an alert naming it
        # (docs/upgrades.md); the undo goes latest step first, so the work of the steps before
        # the latest one named is left for the operator that alert calls.
        order = list(steps)
        stopped_at = max((order.index(a) for a in alerted if a in order), default=-1)
        for name, rs in rows.items():
            standing = [r["RowKey"] for r in rs if r.get("Status") == "applied"]
            if not standing:
                # Work an earlier generation did and undid (the order since resubmitted) is
                # not this generation's step's.
                key = steps.get(name, {}).get("work_key")
                undone = [r for r in rs if r.get("Status") == "undone"
                          and (not int(s.get("Resubmissions") or 0) or r["RowKey"] == key)]
                if undone and steps.get(name, {}).get("status") != "compensated":
                    verdict.fail("work undone but its step not compensated",
                                 f"{oid} {name}: {brief(s)}")
                continue
            if s.get("Compensation") == "Done":
                verdict.fail("a compensated order's work still standing",
                             f"{oid} {name}: {standing}; record {brief(s)}")
            elif name not in alerted and not (name in order
                                              and order.index(name) < stopped_at):
                verdict.fail("compensation failed with no alert naming the step",
                             f"{oid} {name}: {standing}; alerts name {sorted(alerted)}; "
                             f"record {brief(s)}")
        if s.get("Compensation") == "Failed" and not alerted:
            verdict.fail("compensation failed with no alert naming the step", f"{oid}: {brief(s)}")
    return Counter(str(e.get("Status")) for e in effects)


def _index_due(entry: Mapping[str, Any]) -> datetime | None:
    row = str(entry.get("RowKey", ""))
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(row.split("|")[0]).astimezone(UTC)
    return None


def supervisor_interval(settings: Mapping[str, str]) -> float:
    first = settings.get("SupervisorSchedule", "*/10").split()[0]
    return float(first.removeprefix("*/")) if first.startswith("*/") else 10.0


def judge(store: Store, sent: list[str], settled_at: float | None, sending: float,
          send_done: float, roll: list[dict[str, Any]],
          stats: Mapping[str, dict[str, Any]], logs: Path,
          settings: Mapping[str, str]) -> tuple[Verdict, dict[str, Any]]:
    v = Verdict()
    states = store.states()
    mine = {o: states[o] for o in sent if o in states}
    for oid in sent:
        if oid not in states:
            v.fail("sent, no state record (lost)", oid)
        elif not is_settled(states[oid]):
            v.fail("not settled", f"{oid}: {brief(states[oid])}")
    for oid in sorted(set(states) - set(sent)):
        v.fail("a state record for an order nobody sent", oid)
    rejected = store.table("RejectedOrdersTableName")
    for r in rejected:
        v.fail("rejected at intake", f"{r.get('PartitionKey')}/{r.get('RowKey')}: "
                                     f"{str(r.get('Reason') or r)[:300]}")
    effects = store.table("SimulatorTableName")
    alerts = store.table("OperatorAlertsTableName")
    ledger = audit_ledger(mine, effects, alerts, v)
    # Overdue: an index entry (an order the Supervisor must still look at) past its time by
    # more than a few ticks, once the orders have settled and the app has had its time.
    now = datetime.now(UTC)
    slack = timedelta(seconds=3 * supervisor_interval(settings))
    index = store.index_entries()
    for e in index:
        due = _index_due(e)
        if e["PartitionKey"] == "inflight" or due is None or due < now - slack:
            oid = str(e.get("OrderID") or e["RowKey"])
            v.fail("left overdue in the due-time index",
                   f"{e['PartitionKey']}/{e['RowKey']}: {brief(states.get(oid))}")
    for name, n in store.messages_in("-poison").items():
        v.fail("messages poisoned", f"{name}: {n}")
    for name, n in store.messages_in("-deadletter").items():
        v.fail("orders dead-lettered", f"{name}: {n}")
    failures: dict[str, dict[str, int]] = {}
    for log in sorted(logs.glob("*.log")):
        found = _failures_in(log)
        if found:
            failures[log.stem] = dict(found)
    processed = [o for o, s in mine.items() if s.get("ProcessState") == "Processed"]
    failed = [s for s in mine.values() if s.get("ProcessState") == "Error"]
    latencies = sorted(
        (s["UpdatedAt"] - s["CreatedAt"]).total_seconds() for s in mine.values()
        if is_settled(s) and isinstance(s.get("UpdatedAt"), datetime)
        and isinstance(s.get("CreatedAt"), datetime))
    summary: dict[str, Any] = {
        "orders_sent": len(sent),
        "recorded": len(mine),
        "settled": sum(is_settled(s) for s in mine.values()),
        "processed": len(processed),
        "failed_compensated": sum(s.get("Compensation") == "Done" for s in failed),
        "failed_compensation_failed": sum(s.get("Compensation") == "Failed" for s in failed),
        "orders_retried": sum(int(s.get("FailureCount") or 0) > 0 for s in mine.values()),
        "retries": sum(int(s.get("FailureCount") or 0) for s in mine.values()),
        "last_written_by": dict(Counter(_last_written_by(s) for s in mine.values())),
        "ledger": dict(ledger),
        "alerts": dict(Counter(str(a.get("Kind")) for a in alerts)),
        "rolls": roll,
        "sending_seconds": round(send_done - sending, 1),
        "settled_after_last_send_seconds":
            round(settled_at - send_done, 1) if settled_at else None,
        "order_seconds_median": _pct(latencies, 0.5),
        "order_seconds_p95": _pct(latencies, 0.95),
        "order_seconds_max": _pct(latencies, 1.0),
        "host_stats": dict(stats),
        "function_failures": failures,
        "index_entries_left": len(index),
        "orders_handled_by": dict(Counter(
            " + ".join(sorted(r)) for r in handled_by(logs, sent).values())),
    }
    return v, summary


def check_resubmits_and_workflows(store: Store, sender: Sender, resubmitter: Resubmitter,
                                   proxy: ServiceProxy, v: Verdict,
                                   summary: dict[str, Any]) -> None:
    """Every resubmit taken (202) or refused with a reason (409), a taken one in its order's
    record; every order naming the second workflow run by it."""
    states = store.states()
    for a in resubmitter.answers:
        if a["status"] not in (202, 409):
            v.fail("a resubmit answered otherwise than 202 or 409",
                   f"{a['order']} at {a['host']}: {a['status']} {a['answer']}")
        elif a["status"] == 202 and int(states.get(a["order"], {}).get("Resubmissions")
                                        or 0) < 1:
            v.fail("a resubmit taken but not in the order's record",
                   f"{a['order']} at {a['host']}: {brief(states.get(a['order']))}")
    for oid in sender.sent_digital:
        workflow = states.get(oid, {}).get("Workflow")
        if oid in states and workflow != DIGITAL:
            v.fail("an order of the second workflow run by another",
                   f"{oid}: {workflow!r}; {brief(states[oid])}")
    for a in resubmitter.cancels:
        if a["status"] not in (202, 409):
            v.fail("a cancel answered otherwise than 202 or 409",
                   f"{a['order']} at {a['host']}: {a['status']} {a['answer']}")
        elif a["status"] == 202 and states.get(a["order"], {}).get("ProcessState") != (
                "Cancelled"):
            v.fail("a cancel taken but the order not Cancelled",
                   f"{a['order']} at {a['host']}: {brief(states.get(a['order']))}")
    for a in resubmitter.pauses:
        if a["status"] != 200:
            v.fail("a pause or resume refused", f"at {a['host']}: {a['status']} {a['answer']}")
    if [a["resume"] for a in resubmitter.pauses] != [False, True]:
        v.fail("the service was not paused and resumed once",
               str([(a["resume"], a["status"]) for a in resubmitter.pauses]))
    summary["held_by_the_pause"] = sum(
        "waiting: service" in str(s.get("Timeline")) for s in states.values())
    summary["cancels"] = dict(Counter(str(a["status"]) for a in resubmitter.cancels))
    taken = [a for a in resubmitter.answers if a["status"] == 202]
    summary["resubmits"] = dict(Counter(
        f"{a['release']} {'forced' if a['forced'] else 'normal'} {a['status']}"
        for a in resubmitter.answers))
    summary["resubmitted_orders"] = len({a["order"] for a in taken})
    summary["resubmitted_then"] = dict(Counter(
        _outcome(states.get(a["order"], {})) for a in taken))
    summary["digital_sent"] = len(sender.sent_digital)
    summary["digital_outcomes"] = dict(Counter(
        _outcome(states.get(o, {})) for o in sender.sent_digital))
    summary["undo_refused"] = dict(proxy.undo_refused)


def check_redrive(store: Store, started: Mapping[str, Any] | None,
                  ended: Mapping[str, Any] | None, v: Verdict, summary: dict[str, Any]) -> None:
    """The re-drive started (202) and ended done; the orders whose history names it are as many
    as it counts resubmitted, each named once."""
    if started is None or started["status"] != 202:
        v.fail("the re-drive was not started", str(started))
        return
    if ended is None or ended["State"] != "done":
        v.fail("the re-drive did not end", str(ended)[:500])
        return
    mark = f"re-drive {ended['Id']}:"
    named = Counter[str]()
    for oid, s in store.states().items():
        for h in json.loads(s.get("History") or "[]"):
            if str(h.get("reason", "")).startswith(mark):
                named[oid] += 1
    twice = sorted(o for o, n in named.items() if n > 1)
    if twice:
        v.fail("an order resubmitted twice by the re-drive", ", ".join(twice[:10]))
    if len(named) != ended["Resubmitted"]:
        v.fail("the re-drive's count is not what its orders' records say",
               f"counted {ended['Resubmitted']}, named by {len(named)}")
    summary["redrive"] = {k: ended[k] for k in ("Resubmitted", "Refused", "Scanned", "Rate")}


def _outcome(s: Mapping[str, Any]) -> str:
    label = str(s.get("ProcessState", "no record"))
    return (f"{label}/{s.get('Compensation') or 'pending'}" if label in ("Error", "Cancelled")
            else label)


def handled_by(logs: Path, orders: list[str]) -> dict[str, set[str]]:
    """Which releases' hosts were handed a message of each order (their message logs)."""
    wanted = set(orders)
    out: dict[str, set[str]] = {o: set() for o in orders}
    for f in logs.glob("*.messages.jsonl"):
        release = f.name.removesuffix(".messages.jsonl").partition("@")[2]
        release = "current" if release == "current" else "previous"
        for line in f.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                oid = json.loads(json.loads(line)["body"]).get("order_id")
                if oid in wanted:
                    out[oid].add(release)
    return out


def _failures_in(log: Path) -> Counter[str]:
    found: Counter[str] = Counter()
    text = log.read_text()
    for m in re.finditer(r"function (\w+) failed\n(?:(?:Traceback| ).*\n)*(\S.*)", text):
        found[f"{m.group(1)}: {m.group(2)[:160]}"] += 1
    for m in re.finditer(r"(\w+): message \S+ moved to (\S+)", text):
        found[f"{m.group(1)}: poisoned into {m.group(2)}"] += 1
    return found


def _last_written_by(s: Mapping[str, Any]) -> str:
    """Which release wrote the record last, read off its shape: this release's records name
    their workflow, the previous release's do not."""
    return "current" if s.get("Workflow") else "previous"


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))], 1)


def print_summary(say: Any, label: str, s: Mapping[str, Any], verdict: Verdict) -> None:
    say("")
    say(f"rolling deployment {label} -> current: summary")
    for k in ("orders_sent", "recorded", "settled", "processed", "failed_compensated",
              "failed_compensation_failed", "orders_retried", "retries", "last_written_by",
              "ledger", "alerts", "sending_seconds", "settled_after_last_send_seconds",
              "order_seconds_median", "order_seconds_p95", "order_seconds_max",
              "orders_handled_by", "index_entries_left", "resubmits", "resubmitted_orders",
              "resubmitted_then", "cancels", "held_by_the_pause", "digital_sent",
              "digital_outcomes", "undo_refused", "redrive", "total_seconds"):
        say(f"  {k:34} {s.get(k)}")
    for r in s.get("rolls", []):
        say(f"  killed {r['host']:27} at {r['killed_at']:.1f}s ({r['sent_by_then']} sent, "
            f"{r['in_flight']} in flight), its successor up in {r['down']:.1f}s")
    for run_, st in s.get("host_stats", {}).items():
        inv = st.get("invocations", {})
        say(f"  {run_:34} {sum(inv.values()) if inv else 0} invocations, "
            f"{sum((st.get('failures') or {}).values())} failed, {st.get('poisoned')} poisoned")
    for run_, found in s.get("function_failures", {}).items():
        for what, n in found.items():
            say(f"  failures in {run_}: {n} x {what}")
    if verdict.ok:
        say("PASS: every order settled, nothing lost, no work done twice, none overdue")
        return
    say("FAIL:")
    for check, details in verdict.problems.items():
        say(f"  {check}: {len(details)}")
        for d in details[:5]:
            say(f"    {d}")
