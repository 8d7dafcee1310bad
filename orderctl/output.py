"""How the CLI prints: results on stdout, errors and progress on stderr; the row tables the
commands share, and an order's steps, its timeline and the health report as they read."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from shared.domain import text

# markup=False: what the CLI prints comes from outside (message ids, a service's error text, an
# operator's reason, a made-up request's step); read as Rich markup, "[fraud]" vanished and
# "[/]" raised. The CLI's own emphasis is given as styles instead.


def inert(value: Any) -> Any:
    """``value`` with every string in it shown, not acted on (shared/domain/text.py). For the
    human output; --json is JSON, escaped already."""
    if isinstance(value, str):
        return text.inert(value)
    if isinstance(value, dict):
        return {k: inert(v) for k, v in value.items()}
    if isinstance(value, list):
        return [inert(v) for v in value]
    return value


def api_shape(view: BaseModel) -> dict[str, Any]:
    """A view of the app's as its API answers it: the CLI prints the one shape either way."""
    return view.model_dump(mode="json")


def out() -> Console:
    # emoji=False too: an order id may hold colons, and "tenant:a:42" printed as "tenant🅰42".
    return Console(file=sys.stdout, highlight=False, markup=False, emoji=False)


def err() -> Console:
    # soft_wrap: an error stays one line, however narrow the terminal.
    return Console(file=sys.stderr, highlight=False, soft_wrap=True, markup=False, emoji=False)


def print_error(message: str) -> None:
    err().print(Text.assemble(("error:", "red"), " ", inert(message)))


def step_table(view: dict[str, Any]) -> Table:
    t = Table("step", "status", "attempt", "complete by", "last error", "result", box=None)
    for s in view["Steps"]:
        t.add_row(*inert([s["name"], s["status"], str(s["attempt"]), s["complete_by"] or "",
                          s["last_error"] or "", result_text(s.get("result"))]))
    return t


# A step's result as a line of the status table: its JSON, cut (the API and --json give it
# whole).
RESULT_WIDTH = 120


def result_text(result: Any) -> str:
    """As JSON, whose escapes leave C0 controls inert; inert() the line it goes into."""
    if result is None:
        return ""
    line = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
    return line if len(line) <= RESULT_WIDTH else line[:RESULT_WIDTH - 1] + "…"


def print_health(report: dict[str, Any]) -> None:
    report = inert(report)
    c = out()
    c.print(f"status: {report['status']}")
    t = Table("check", "outcome", "backlog", "poison")
    for name, outcome in report["checks"].items():
        queue = name.removeprefix("queue:") if name.startswith("queue:") else None
        t.add_row(name, outcome, *(("" if queue is None or d.get(queue) is None else
                                    str(d[queue])) for d in (report["backlog"],
                                                             report["poison"])))
    c.print(t)
    breakers = report["breakers"]
    c.print("breakers: " + (", ".join(f"{k} {v}" for k, v in breakers.items()) if breakers
                            is not None else "known to the app only: pass --api to read them"),
            soft_wrap=True)
    sup = report["supervisor"]
    c.print(f"Supervisor: last tick {sup['last_tick'] or 'never'}"
            + (f" ({sup['seconds_since']:g} s ago)" if sup["seconds_since"] is not None else "")
            + (f"; {sup['problem']}" if sup["problem"] else ""), soft_wrap=True)
    paused = report.get("paused")
    c.print("paused: " + ("could not be read" if paused is None else "; ".join(
        f"{p['Kind']} {p['Name']} by {p['By'] or 'an operator'} since {p['Since']}"
        + (f" ({p['Reason']})" if p["Reason"] else "") for p in paused) or "nothing"),
            soft_wrap=True)


def timeline_of(view: dict[str, Any], alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The order's story, line by line (its texts as they were recorded: inert() them before
    printing)."""
    rows = [{"at": view["CreatedAt"], "what": "received"}]
    for h in view["History"]:
        steps = "; ".join(f"{k} {v}" for k, v in (h.get("steps") or {}).items())
        rows.append({"at": h.get("at"), "what": (
            f"resubmitted{' with force' if h.get('forced') else ''}: "
            f"{h.get('reason') or 'no reason given'} (before: {h.get('previous_error') or '-'}; "
            f"{steps})")})
    for e in view.get("Timeline") or []:  # what the record kept, event by event
        if e["event"] == "received":
            continue
        what = e["event"] + (f" {e['step']}" if e.get("step") else "") + (
            f" attempt {e['attempt']}" if e.get("attempt") else "")
        what += (f": {e['detail']}" if e.get("detail") else "") + (
            f" (by {e['by']})" if e.get("by") else "")
        rows.append({"at": e["at"], "what": what})
    for a in alerts:
        rows.append({"at": a["RaisedAt"], "what": f"alert {a['Kind']}"
                     f"{' at ' + a['Step'] if a['Step'] else ''}: {a['Reason']}"})
    rows.sort(key=lambda r: r["at"] or "")
    for s in view["Steps"]:
        what = f"step {s['name']}: {s['status']} after {s['attempt']} attempt(s)"
        if s["last_error"]:
            what += f", last error {s['last_error']}"
        if s["work_key"]:
            what += f", work key {s['work_key']}"
        if s.get("result") is not None:
            what += f", result {result_text(s['result'])}"
        rows.append({"at": None, "what": what})
    comp = f", compensation {view['Compensation']}" if view["Compensation"] else ""
    rows.append({"at": view["UpdatedAt"], "what": f"now {view['ProcessState']}{comp}"
                 + (f": {view['LastError']}" if view["LastError"] else "")})
    return rows


def id_column(header: str, ids: list[str]) -> Column:
    """Ids stay whole on a narrow terminal (other columns wrap instead): they get copied."""
    return Column(header, no_wrap=True, min_width=max([len(header), *map(len, ids)]))


def print_rows(rows: list[dict[str, Any]], columns: tuple[str, ...], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, default=str))
        return
    rows = inert(rows)
    cells = [[str(r.get(c) or "") for c in columns] for r in rows]
    c = out()
    widths = _widths(columns, cells)
    # A table when every column but the widest of the others than ids fits unwrapped and that
    # one keeps PROSE_WIDTH (a reason wraps as prose; an id never does); else a block a row,
    # its first column then each field's name and value, so that no column is folded a few
    # letters a line.
    prose = max((w for w, h in zip(widths, columns, strict=True) if h not in ID_COLUMNS),
                default=0)
    if cells and sum(widths) - prose + min(prose, PROSE_WIDTH) + 3 * len(columns) + 1 > c.width:
        for x in cells:
            c.print(x[0], soft_wrap=True)
            for name, value in zip(columns[1:], x[1:], strict=True):
                if value:
                    c.print(_indented(f"{name}: {value}", c.width, then="    "), soft_wrap=True)
        return
    t = Table(*(id_column(h, [x[i] for x in cells]) if h in ID_COLUMNS else h
                for i, h in enumerate(columns)))
    for x in cells:
        t.add_row(*x)
    c.print(t)
    if not rows:
        err().print("none")


# Columns whose values get copied into the next command: never wrapped.
ID_COLUMNS = ("OrderID", "MessageId", "AlertId", "Kind", "Id")
# The least a table's widest column (a reason, an error) is given before rows become blocks.
PROSE_WIDTH = 30


def print_bulk(result: dict[str, Any], columns: tuple[str, ...],
               row: Callable[[dict[str, Any]], tuple[str, ...]], verb: str, dry_run: bool,
               skipped: str = "") -> bool:
    """A bulk action's outcome (resubmit, cancel): a row an order, then one line of counts on
    standard error. Returns whether any order was refused (the command then exits 1)."""
    items: list[dict[str, Any]] = inert(result["Items"])
    t = Table(id_column("order", [i["OrderID"] for i in items]), *columns)
    for i in items:
        t.add_row(i["OrderID"], *row(i))
    out().print(t)
    done = sum(1 for i in items if i["Outcome"] != "refused")
    err().print(f"{done} order(s) {'would be ' if dry_run else ''}{verb}, "
                f"{len(items) - done} refused" + skipped
                + ("; more match than this batch (--limit), or than one request reads: run it "
                   "again once these are done" if result["More"] else "")
                + (" (dry run: nothing was changed)" if dry_run else ""))
    return done < len(items)


def print_orders(listed: list[dict[str, Any]]) -> None:
    """Orders of `orders list` (inert already): a table when its rows fit the terminal
    unwrapped; else two lines an order, so that nothing is folded a few letters a line: the
    id, state and time, then indented its workflow, step, failures and last error, wrapped as
    prose."""
    rows = [(o["OrderID"], o["ProcessState"] + (f"/{o['Compensation']}" if o["Compensation"]
                                                else ""),
             f"{o['Workflow'] or 'default'} v{o['WorkflowVersion'] or 1}",
             str(o["FailureCount"]), o["CurrentStep"] or "", _when(o["UpdatedAt"]),
             o["LastError"] or "") for o in listed]
    headers = ("order", "state", "workflow", "failures", "current step", "updated (UTC)",
               "last error")
    c = out()
    if not rows:
        err().print("none")
        return
    widths = _widths(headers, rows)
    if sum(widths) + 2 * (len(widths) - 1) <= c.width:
        t = Table(*(Column(h, no_wrap=True) for h in headers), box=None, pad_edge=False)
        for r in rows:
            t.add_row(*r)
        c.print(t)
        return
    for order_id, state, workflow, failures, step, when, error in rows:
        # The time as one word: a long id moves it to a line of its own, whole.
        c.print(f"{order_id}  {state}  {when.replace(' ', 'T')}", soft_wrap=True)
        detail = workflow + (f" at {step}" if step else "") + (
            f", {failures} failure{'' if failures == '1' else 's'}" if failures != "0" else "")
        c.print(_indented(f"{detail}: {error}" if error else detail, c.width, then="  "),
                soft_wrap=True)


def _widths(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width unwrapped: its header's or its longest cell's."""
    return [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]


def _when(at: str | None) -> str:
    """An ISO 8601 time in UTC as a person reads it, to the second."""
    return (at or "")[:19].replace("T", " ")


def _indented(prose: str, width: int, then: str) -> str:
    """``prose`` wrapped to ``width`` under a row's first line, two spaces in, its further
    lines ``then`` in; words (an id, a URL) never broken."""
    return textwrap.fill(prose, width=width, initial_indent="  ", subsequent_indent=then,
                         break_long_words=False, break_on_hyphens=False)
