"""Operating on one order, or on the failed ones in bulk: `orders status`, `list`, `trace` and
`resubmit`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import quote

import typer
from pydantic import BaseModel
from rich.table import Column, Table
from rich.text import Text

from orderctl.connection import call_api, opts
from orderctl.errors import CliError
from orderctl.identity import cli_operator
from orderctl.output import (
    api_shape,
    err,
    inert,
    out,
    print_bulk,
    print_orders,
    step_table,
    timeline_of,
)
from shared.domain.state import ProcessState
from shared.handlers.operator import Operator
from shared.handlers.operator_requests import (
    MAX_BULK,
    BulkResubmitRequest,
    CancelRefused,
    OrderNotFound,
    ResubmitRefused,
    ResumeRefused,
)


def status(order_id: str,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show an order's state record, each step with its attempts and last error."""
    try:
        view = api_shape(opts.container().operator.get(order_id))
    except OrderNotFound:
        raise CliError(f"no order {order_id!r}") from None
    except ValueError as e:  # not an order id
        raise CliError(str(e), 2) from None
    if as_json:
        print(json.dumps(view, indent=2, default=str))
        return
    c, shown = out(), inert(view)
    c.print(Text.assemble((shown["OrderID"], "bold"), f"  {shown['ProcessState']}"
                          + (f"  compensation {shown['Compensation']}" if shown["Compensation"]
                             else "")))
    # The version the order started on: the steps it follows, whatever the latest is.
    c.print(f"  Workflow: {shown['Workflow'] or 'the default'} "
            f"v{shown.get('WorkflowVersion') or 1}")
    for k in ("LockedBy", "CompleteBy", "FailureCount", "Resubmissions", "LastError",
              "CreatedAt", "UpdatedAt"):
        c.print(f"  {k}: {shown[k]}")
    if shown.get("Held"):  # its step's complete-by is then the safety net's, an hour on
        kind, _, name = str(shown["Held"]).partition(":")
        c.print(f"  Held: {shown['Held']} (a pause holds it, no failure counted; it goes on "
                f"within seconds of `orders resume {kind} {name}`)", soft_wrap=True)
    c.print(step_table(view))
    for h in shown["History"]:
        c.print(f"  earlier: {h['at']} resubmitted ({h.get('reason') or 'no reason'}); "
                f"was: {h.get('previous_error')}")


def list_(
    state: Annotated[str | None, typer.Option(
        help=f"{', '.join(s.value for s in ProcessState)}.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Orders per page.")] = 20,
    continuation: Annotated[str | None, typer.Option(help="Token from the previous page.")
                            ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List orders, optionally of one state, a page at a time."""
    try:
        page = api_shape(opts.container().operator.orders(state, limit, continuation))
    except ValueError as e:
        raise CliError(str(e), 2) from None
    if as_json:
        print(json.dumps({"orders": page["orders"], "continuation": page["continuation"]},
                         default=str))
        return
    # The workflow and its version: which orders a version still has (docs/adapting.md).
    print_orders(inert(page["orders"]))
    if page["continuation"]:
        err().print(f"more: --continuation {page['continuation']}")


def resubmit(order_id: Annotated[str | None, typer.Argument(
        help="The order; or leave it out and pick failed orders with --state and the filters.")
        ] = None,
        reason: Annotated[str, typer.Option(
            help="Why it can go round again (kept in its history).")] = "",
        force: Annotated[bool, typer.Option(
            "--force", help="Resubmit although its compensation failed: you have checked the "
            "work still standing at the services. Standing work is kept, not redone.")] = False,
        state: Annotated[str | None, typer.Option(
            help="Resubmit every order of this state the filters pick (only Error can be).")
        ] = None,
        since: Annotated[str | None, typer.Option(
            help="With --state: failed at or after this time (ISO 8601, or an age: 30m, 2h, "
                 "1d).")] = None,
        until: Annotated[str | None, typer.Option(
            help="With --state: failed before this time (the same forms).")] = None,
        failed_step: Annotated[str | None, typer.Option(
            help="With --state: failed at this step.")] = None,
        limit: Annotated[int, typer.Option(
            min=1, max=MAX_BULK, metavar="N",
            help="With --state: at most this many (the batch).")] = 50,
        dry_run: Annotated[bool, typer.Option(
            "--dry-run", help="With --state: only say what would be resubmitted.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        ) -> None:
    """Send a failed order (compensation settled) through the workflow again; or, with
    --state, every failed order the filters pick, a batch at a time (--dry-run first)."""
    if state is not None or order_id is None:
        if order_id is not None or state is None:
            raise CliError("give an order id, or --state Error with filters, not both", 2)
        _resubmit_many(state, since, until, failed_step, limit, reason, force, dry_run,
                       as_json)
        return
    if any(x is not None for x in (since, until, failed_step)) or dry_run:
        raise CliError("--since, --until, --failed-step and --dry-run go with --state", 2)
    if opts.api:
        view = _resubmit_through_api(order_id, reason, force)
    else:
        view = on_storage(order_id, lambda op, by: op.resubmit(order_id, reason, force, by=by))
    if as_json:
        print(json.dumps(view))
        return
    out().print(inert(f"{order_id} resubmitted: {view['ProcessState']} "
                      f"(resubmission {view['Resubmissions']})"))


def on_storage(order_id: str, act: Callable[[Operator, str], BaseModel]) -> dict[str, Any]:
    """An operator's action on one order straight to storage, as whoever holds the storage
    role (cli_operator says who); each refusal said in a line, with its exit code."""
    try:
        return api_shape(act(opts.container().operator, cli_operator()))
    except OrderNotFound:
        raise CliError(f"no order {order_id!r}") from None
    except ValueError as e:  # not an order id, or a reason too long to keep
        raise CliError(str(e), 2) from None
    except (ResubmitRefused, CancelRefused, ResumeRefused) as e:
        raise CliError(str(e)) from None


def bulk(path: str, body: dict[str, Any],
         act: Callable[[Operator, str], BaseModel]) -> dict[str, Any]:
    """A bulk action (resubmit, cancel): through the operator API at ``path`` with --api, else
    straight to storage; a body the request model refuses is said in a line (exit 2)."""
    if opts.api:
        return call_api("POST", path, body, ok=(200, 202))
    try:
        return api_shape(act(opts.container().operator, cli_operator()))
    except ValueError as e:
        raise CliError(str(e), 2) from None


def say_bulk(result: dict[str, Any], as_json: bool, columns: tuple[str, ...],
             row: Callable[[dict[str, Any]], tuple[str, ...]], verb: str, dry_run: bool,
             skipped: str = "") -> None:
    """A bulk action's outcome, as JSON or a table (output.print_bulk); exit 1 when any order
    was refused."""
    if as_json:
        print(json.dumps(result))
        refused = any(i["Outcome"] == "refused" for i in result["Items"])
    else:
        refused = print_bulk(result, columns, row, verb, dry_run, skipped)
    if refused:
        raise typer.Exit(1)


def when(value: str | None, option: str) -> str | None:
    """An ISO 8601 time (UTC if it names no zone), or an age (30m, 2h, 1d) back from now."""
    if value is None:
        return None
    m = re.fullmatch(r"(\d+)([smhd])", value.strip())
    if m:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[m.group(2)]
        return (datetime.now(UTC) - timedelta(**{unit: int(m.group(1))})).isoformat()
    try:
        at = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"{option}: {value!r} is neither a time (2026-11-25T08:00Z) nor an age "
                       "(30m, 2h, 1d)", 2) from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).isoformat()


def _resubmit_many(state: str, since: str | None, until: str | None, failed_step: str | None,
                   limit: int, reason: str, force: bool, dry_run: bool, as_json: bool) -> None:
    body = {"state": state, "since": when(since, "--since"), "until": when(until, "--until"),
            "failed_step": failed_step, "reason": reason, "force": force, "dry_run": dry_run,
            "limit": limit}
    result = bulk("/resubmissions", body,
                  lambda op, by: op.resubmit_many(BulkResubmitRequest.from_body(
                      json.dumps(body).encode()), by=by))
    skipped = result.get("Skipped") or 0
    say_bulk(result, as_json, ("failed step", "failed", "outcome", "why / last error"),
             lambda i: (i["FailedStep"] or "", i["UpdatedAt"], i["Outcome"],
                        i["Why"] or i["LastError"] or ""), "resubmitted", dry_run,
             f"; {skipped} more match that a resubmit would refuse (compensation failed: "
             "--force; or not settled), not picked" if skipped else "")


def _resubmit_through_api(order_id: str, reason: str, force: bool) -> dict[str, Any]:
    """POST /orders/{id}/resubmit as the token's holder; the API's refusal, said as it said it."""
    return call_api("POST", f"/orders/{quote(order_id, safe='')}/resubmit",
                     {"reason": reason, "force": force}, ok=(202,))


def trace(order_id: str,
          as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """An order's timeline from what was recorded (state record, steps, resubmissions, alerts),
    and its trace id for a tracing backend."""
    c = opts.container()
    try:
        view = api_shape(c.operator.get(order_id))
        alerts = [api_shape(a) for a in c.operator.alerts_for(order_id)]
    except ValueError as e:
        raise CliError(str(e), 2) from None
    except OrderNotFound:
        raise CliError(f"no order {order_id!r}") from None
    timeline = timeline_of(view, alerts)
    if as_json:
        print(json.dumps({"order_id": order_id, "trace_id": view["TraceId"],
                          "timeline": timeline}, default=str))
        return
    t = Table(Column("when", no_wrap=True), "what")
    for row in inert(timeline):
        t.add_row(row["at"] or "", row["what"])
    out().print(t)
    out().print(inert(f"trace id: {view['TraceId'] or 'none (the order was not traced)'}"),
                soft_wrap=True)
