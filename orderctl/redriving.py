"""`orders redrive` and `orders redrives`: resubmit failed orders in the background at a pace
(after a provider's outage, say), see each re-drive's progress, pause, resume or cancel it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

import typer
from pydantic import BaseModel

from orderctl.connection import call_api, opts
from orderctl.errors import CliError
from orderctl.identity import cli_operator
from orderctl.orders import when
from orderctl.output import api_shape, err, inert, out, print_rows
from shared.handlers.operator_requests import RedriveRequest
from shared.handlers.redriving import RedriveControl, RedriveRefused, UnknownRedrive

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]
RedriveId = Annotated[str, typer.Argument(help="The re-drive's id (`orders redrives` lists "
                                               "them).")]
# How often --watch asks again.
WATCH_SECONDS = 2.0


def redrive(
        workflow: Annotated[str | None, typer.Option(help="Only orders of this workflow.")
                            ] = None,
        version: Annotated[int | None, typer.Option(
            min=1, help="Only orders that started on this version of it.")] = None,
        failed_step: Annotated[str | None, typer.Option(help="Only orders that failed at this "
                                                             "step.")] = None,
        error_text: Annotated[str | None, typer.Option(
            help="Only orders whose last error holds this text (any case).")] = None,
        since: Annotated[str | None, typer.Option(
            help="Failed at or after this time (ISO 8601, or an age: 30m, 2h, 1d).")] = None,
        until: Annotated[str | None, typer.Option(
            help="Failed before this time (the same forms; never after the start).")] = None,
        force: Annotated[bool, typer.Option(
            "--force", help="Also orders whose compensation failed.")] = False,
        rate: Annotated[float | None, typer.Option(
            min=0.01, max=1000, help="Orders a second (default: the slowest limit among the "
                                      "workflow's services, or 10).")] = None,
        reason: Annotated[str, typer.Option(
            help="Why (required to start; kept in each order's history).")] = "",
        dry_run: Annotated[bool, typer.Option(
            "--dry-run", help="Only count what it would pick.")] = False,
        as_json: AsJson = False) -> None:
    """Resubmit every failed order the filters pick, in the background, at a pace its services'
    limits can take; `orders redrives show ID --watch` shows its progress. --dry-run first."""
    body = {"workflow": workflow, "version": version, "failed_step": failed_step,
            "error_text": error_text, "since": when(since, "--since"),
            "until": when(until, "--until"), "force": force, "rate": rate, "reason": reason,
            "dry_run": dry_run}
    if not dry_run and not reason.strip():
        raise CliError("--reason is required to start a re-drive: say why (each order's "
                       "history keeps it)", 2)
    if opts.api:
        view = call_api("POST", "/redrives", body, ok=(200, 202))
    else:
        try:
            ask = RedriveRequest.from_body(json.dumps(body).encode())
            control = _control()
            view = api_shape(control.preview(ask) if dry_run
                             else control.start(ask, cli_operator()))
        except (ValueError, UnknownRedrive) as e:  # a name the app has not: input too
            raise CliError(str(e), 2) from None
    if as_json:
        print(json.dumps(view))
        return
    if dry_run:
        more = " (more failed orders than one look reads: it may pick more)" \
            if view["More"] else ""
        out().print(inert(f"would pick {view['Matched']} of {view['Scanned']} failed orders "
                          f"read{more}: {view['Picks']}; {view['Rate']:g} a second"))
        if view["Sample"]:
            out().print(inert("e.g. " + ", ".join(view["Sample"])))
        return
    out().print(inert(f"re-drive {view['Id']} started: {view['Picks']}, {view['Rate']:g} a "
                      f"second; `orders redrives show {view['Id']} --watch` shows its progress"))


def redrives(ctx: typer.Context, as_json: AsJson = False) -> None:
    """The newest re-drives with their progress; `show ID --watch` follows one, `pause`,
    `resume` and `cancel` act on one."""
    if ctx.invoked_subcommand is not None:
        return
    listed = call_api("GET", "/redrives") if opts.api else api_shape(_control().list())
    rows = [{**r, "Done": f"{r['Resubmitted']} resubmitted, {r['Refused']} refused"}
            for r in listed["Redrives"]]
    print_rows(rows, ("Id", "State", "Picks", "Rate", "Done", "Created", "By"), as_json)


def show(redrive_id: RedriveId,
         watch: Annotated[bool, typer.Option(
             "--watch", help="Show its progress every 2 s until it ends.")] = False,
         as_json: AsJson = False) -> None:
    """One re-drive's progress: resubmitted, refused (the latest, with why), in hand, read."""
    while True:
        view = _get(redrive_id)
        if as_json:
            print(json.dumps(view))
        else:
            out().print(inert(_progress(view)))
        if not watch or view["State"] in ("done", "cancelled"):
            return
        time.sleep(WATCH_SECONDS)


def _progress(v: dict[str, Any]) -> str:
    line = (f"{v['Id']} {v['State']}: {v['Resubmitted']} resubmitted, {v['Refused']} refused, "
            f"{v['InHand']} in hand, {v['Scanned']} failed orders read; {v['Picks']}, "
            f"{v['Rate']:g} a second")
    if v.get("Waiting"):
        line += f"; waiting: {v['Waiting']}"
    if v.get("ChangedBy") and v["State"] != "running":
        line += f" ({v['State']} by {v['ChangedBy']}: {v.get('ChangeReason') or 'no reason'})"
    for r in v.get("Refusals") or []:
        line += f"\n  refused {r['OrderID']}: {r['Why']}"
    return line


def pause(redrive_id: RedriveId,
          reason: Annotated[str, typer.Option(help="Why (kept in the audit log).")] = "",
          as_json: AsJson = False) -> None:
    """Pause a re-drive: it stops within about a second; `orders redrives resume ID` goes on
    where it stopped."""
    _act(redrive_id, "pause", reason, as_json, lambda c, by: c.pause(redrive_id, reason, by))


def resume(redrive_id: RedriveId,
           reason: Annotated[str, typer.Option(help="Why (kept in the audit log).")] = "",
           as_json: AsJson = False) -> None:
    """Resume a paused re-drive, from where it stopped."""
    _act(redrive_id, "resume", reason, as_json, lambda c, by: c.resume(redrive_id, reason, by))


def cancel(redrive_id: RedriveId,
           reason: Annotated[str, typer.Option(help="Why (kept in the audit log).")] = "",
           as_json: AsJson = False) -> None:
    """Cancel a re-drive: the orders it resubmitted run on, the rest stay failed."""
    _act(redrive_id, "cancel", reason, as_json, lambda c, by: c.cancel(redrive_id, reason, by))


def _control() -> RedriveControl:
    return opts.container().redrives


def _get(redrive_id: str) -> dict[str, Any]:
    if opts.api:
        return call_api("GET", f"/redrives/{quote(redrive_id, safe='')}")
    try:
        return api_shape(_control().get(redrive_id))
    except UnknownRedrive as e:
        raise CliError(str(e)) from None
    except RedriveRefused as e:
        raise CliError(str(e)) from None


def _act(redrive_id: str, action: str, reason: str, as_json: bool,
         act: Callable[[RedriveControl, str], BaseModel]) -> None:
    if opts.api:
        view = call_api("POST", f"/redrives/{quote(redrive_id, safe='')}/{action}",
                        {"reason": reason})
    else:
        try:
            view = api_shape(act(_control(), cli_operator()))
        except ValueError as e:
            raise CliError(str(e), 2) from None
        except (UnknownRedrive, RedriveRefused) as e:
            raise CliError(str(e)) from None
    if as_json:
        print(json.dumps(view))
        return
    err().print(inert(f"re-drive {redrive_id}: {view['State']}"))
