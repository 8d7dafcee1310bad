"""What the pipeline says about itself: `orders health`, the operator alerts (and `alerts ack`)
and what intake rejected (`orders rejected`)."""

from __future__ import annotations

import json
from typing import Annotated
from urllib.parse import quote

import typer

from orderctl.connection import call_api, opts
from orderctl.errors import CliError
from orderctl.identity import cli_operator
from orderctl.output import api_shape, err, inert, out, print_health, print_rows
from shared.adapters.alerts import ALERT_SCAN, AckRefused, AlertNotFound


def health(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Whether storage answers, each remote service's circuit breaker, the last Supervisor
    tick and the backlog of each queue the app reads. Exits 1 when unhealthy or the
    Supervisor is late."""
    if opts.api:
        report = call_api("GET", "/health/details", ok=(200, 503))
    else:
        report = api_shape(opts.container().operator.health(detailed=True))
        # This process's breakers are not the app's: only the app can say (--api).
        report["breakers"] = None
    if as_json:
        print(json.dumps(report))
    else:
        print_health(report)
    sup = report["supervisor"]
    if report["status"] != "ok" or sup["late"]:
        raise CliError("unhealthy: " + "; ".join(
            [f"{k}: {v}" for k, v in report["checks"].items() if v != "ok"]
            + ([f"Supervisor: {sup['problem']}"] if sup["problem"] else [])))


def alerts(ctx: typer.Context,
           limit: Annotated[int, typer.Option(min=1, max=1000, metavar="N",
                                              help="How many alerts at most.")] = 20,
           acknowledged: Annotated[bool | None, typer.Option(
               "--acknowledged/--open",
               help="Only acknowledged alerts (with who and when), or only open ones; "
                    "default both.")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
           wide: Annotated[bool, typer.Option(
               "--wide", help="Also show the alert id (what `alerts ack` takes).")] = False,
           kind: Annotated[str | None, typer.Option(
               help="Only alerts of this kind (OrderFailed, RequestRefused, ...).")] = None,
           ) -> None:
    """Operator alerts: the recent ones (the last 7 days), newest first, each day's orders'
    before those raised by what anyone may send (made-up requests, conflicting bodies: one
    line a day per source, counted); `alerts ack` acknowledges one."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        page = opts.container().operator.alerts(limit, acknowledged=acknowledged, kind=kind)
    except ValueError as e:  # a kind the app does not raise
        raise CliError(str(e), 2) from None
    rows = [api_shape(a) for a in page.alerts]
    if page.truncated:  # on stderr, so that --json stays the list it was
        err().print(f"read the newest {ALERT_SCAN:,} alerts of the last 7 days and stopped: "
                    "older ones are not shown")
    if as_json:
        print_rows(rows, (), True)
        return
    columns: tuple[str, ...] = ("RaisedAt", "Kind", "OrderID", "Step", "Reason")
    rows = [{**r, "Reason": f"{r['Reason']} (the latest of {r['Count']} that day from "
                            f"{r['Source']}, at {r['LastRaisedAt']})"} if r.get("Count")
            else r for r in rows]
    if acknowledged is not False:  # who and when, in one column
        columns += ("Acknowledged",)
        rows = [{**r, "Acknowledged": f"by {r['AcknowledgedBy']} at {r['AcknowledgedAt']}"
                 if r["AcknowledgedAt"] else ""} for r in rows]
    print_rows(rows, (("AlertId", *columns) if wide else columns), False)


def alerts_ack(alert_id: Annotated[str, typer.Argument(
                   help="The alert's id (`orders alerts --wide` or --json shows it).")],
               note: Annotated[str, typer.Option(help="Kept on the alert with your name.")
                               ] = "",
               as_json: Annotated[bool, typer.Option(
                   "--json", help="Print the acknowledged alert as JSON.")] = False) -> None:
    """Acknowledge an alert: your name and the time are kept on it."""
    if opts.api:
        view = call_api("POST", f"/alerts/{quote(alert_id, safe='')}/ack", {"note": note})
    else:
        try:
            view = api_shape(opts.container().operator.acknowledge(alert_id, cli_operator(),
                                                                   note))
        except AlertNotFound:
            raise CliError(f"no alert {alert_id!r}") from None
        except ValueError as e:  # not an alert id, or a note too long to keep
            raise CliError(str(e), 2) from None
        except AckRefused as e:
            raise CliError(str(e)) from None
    if as_json:
        print(json.dumps(view, default=str))
        return
    out().print(inert(f"{alert_id} acknowledged by {view['AcknowledgedBy']} at "
                      f"{view['AcknowledgedAt']}"), soft_wrap=True)


def rejected(limit: Annotated[int, typer.Option(min=1, max=1000, help="Rows per page.")] = 20,
             continuation: Annotated[str | None, typer.Option(
                 help="Token from the previous page.")] = None,
             as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Invalid or conflicting orders that intake recorded, with the reason, newest first, a page
    at a time."""
    try:
        page = api_shape(opts.container().operator.rejected(limit, continuation))
    except ValueError as e:
        raise CliError(str(e), 2) from None
    if as_json:
        print(json.dumps(page, default=str))
        return
    print_rows(page["rejected"], ("RejectedAt", "Kind", "MessageId", "Reason"), False)
    if page["continuation"]:
        err().print(f"more: --continuation {page['continuation']}")
