"""`orders cancel`: stop an order still running and have its work undone; or, with --state,
every running order the filters pick, a batch at a time (--dry-run first)."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote

import typer

from orderctl.connection import call_api, opts
from orderctl.errors import CliError
from orderctl.orders import bulk, on_storage, say_bulk, when
from orderctl.output import inert, out
from shared.handlers.operator_requests import (
    MAX_BULK,
    BulkCancelRequest,
)


def cancel(order_id: Annotated[str | None, typer.Argument(
        help="The order; or leave it out and pick running orders with --state and the "
             "filters.")] = None,
        reason: Annotated[str, typer.Option(
            help="Why (required; kept on its timeline with your name).")] = "",
        state: Annotated[str | None, typer.Option(
            help="Cancel every order of this state the filters pick (Pending, Processing or "
                 "Parked; 'any' for Pending and Processing).")] = None,
        prefix: Annotated[str | None, typer.Option(
            help="With --state: only orders whose id starts with this.")] = None,
        since: Annotated[str | None, typer.Option(
            help="With --state: received at or after this time (ISO 8601, or an age: 30m, "
                 "2h, 1d).")] = None,
        until: Annotated[str | None, typer.Option(
            help="With --state: received before this time (the same forms).")] = None,
        limit: Annotated[int, typer.Option(
            min=1, max=MAX_BULK, metavar="N",
            help="With --state: at most this many (the batch).")] = 50,
        dry_run: Annotated[bool, typer.Option(
            "--dry-run", help="With --state: only say what would be cancelled.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        ) -> None:
    """Stop an order that is Pending or Processing: nothing more is sent for it, and what its
    steps did is undone, latest first. It ends Cancelled. A Processed order is not cancelled
    (undoing a delivered order is a business process), nor a failed one."""
    if not reason.strip():
        raise CliError("--reason is required: say why (it is kept on the order's timeline)", 2)
    if state is not None or order_id is None:
        if order_id is not None or state is None:
            raise CliError("give an order id, or --state with filters, not both", 2)
        _cancel_many(None if state == "any" else state, prefix, since, until, limit, reason,
                     dry_run, as_json)
        return
    if any(x is not None for x in (prefix, since, until)) or dry_run:
        raise CliError("--prefix, --since, --until and --dry-run go with --state", 2)
    if opts.api:
        view = call_api("POST", f"/orders/{quote(order_id, safe='')}/cancel",
                        {"reason": reason}, ok=(202,))
    else:
        view = on_storage(order_id, lambda op, by: op.cancel(order_id, reason, by=by))
    if as_json:
        print(json.dumps(view))
        return
    out().print(inert(f"{order_id} cancelled: its work is being undone (compensation "
                      f"{view['Compensation']})"))


def _cancel_many(state: str | None, prefix: str | None, since: str | None, until: str | None,
                 limit: int, reason: str, dry_run: bool, as_json: bool) -> None:
    body: dict[str, Any] = {"state": state, "prefix": prefix, "since": when(since, "--since"),
                            "until": when(until, "--until"), "reason": reason,
                            "dry_run": dry_run, "limit": limit}
    result = bulk("/cancellations", body,
                  lambda op, by: op.cancel_many(BulkCancelRequest.from_body(
                      json.dumps(body).encode()), by=by))
    say_bulk(result, as_json, ("updated", "outcome", "why"),
             lambda i: (i["UpdatedAt"], i["Outcome"], i["Why"] or ""), "cancelled", dry_run)
