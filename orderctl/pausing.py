"""`orders pause`, `orders resume`, `orders pauses`: hold a service's calls or a workflow's
intake, let them go again, and see what is paused, by whom and since when."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

import typer
from pydantic import BaseModel

from orderctl.connection import call_api, opts
from orderctl.errors import CliError
from orderctl.identity import cli_operator
from orderctl.orders import on_storage
from orderctl.output import api_shape, inert, out, print_rows
from shared.domain.pauses import PauseKind
from shared.handlers.pausing import PauseControl, PauseRefused, UnknownTarget

Kind = Annotated[str, typer.Argument(help="service or workflow")]
Name = Annotated[str, typer.Argument(help="Its name (`orders pauses` lists them).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def pause(kind: Kind, name: Name,
          reason: Annotated[str, typer.Option(
              help="Why (required; shown with the pause and kept in the audit log).")] = "",
          as_json: AsJson = False) -> None:
    """Pause a service (its Agent calls nothing; its steps wait, their time stopped, no
    failure counted) or a workflow's intake (its new orders are taken and wait, Pending).
    Holds on every instance within 5 s, until `orders resume`. Not the circuit breaker, which
    is automatic and lasts seconds."""
    if not reason.strip():
        raise CliError("--reason is required: say why (it is shown with the pause)", 2)
    view = _act("", kind, name, reason, lambda c, by: c.pause(kind, name, reason, by))
    _say(view, as_json, f"{kind} {name} paused: its work waits until `orders resume "
                        f"{kind} {name}`")


def resume(what: Annotated[str | None, typer.Argument(
               help="service or workflow (then its NAME), or a parked order's id",
               show_default=False)] = None,
           name: Annotated[str | None, typer.Argument(
               help="The service's or workflow's name.", show_default=False)] = None,
           reason: Annotated[str, typer.Option(help="Why (kept in the audit log).")] = "",
           as_json: AsJson = False) -> None:
    """Resume a paused service or workflow (`resume service NAME`): its waiting steps are
    sent again (the same attempt and key) and its waiting orders start, the longest held
    first, from the first Supervisor tick once every instance knows (5 s). Or go on with a
    parked order (`resume ORDER_ID`), once the person it waited for has acted: from the step
    that needed them, under the same key."""
    if what is None:
        raise CliError("say what to resume: service NAME, workflow NAME, or a parked order's "
                       "id", 2)
    if name is None and what in {k.value for k in PauseKind}:
        raise CliError(f"say which {what} to resume (`orders pauses` lists them)", 2)
    if name is None:
        view = _resume_order(what, reason)
        _say(view, as_json, f"{what} resumed: it goes on from the step that waited")
        return
    view = _act("/resume", what, name, reason, lambda c, by: c.resume(what, name, reason, by))
    _say(view, as_json, f"{what} {name} resumed: what waited goes on")


def _resume_order(order_id: str, reason: str) -> dict[str, Any]:
    if opts.api:
        return call_api("POST", f"/orders/{quote(order_id, safe='')}/resume",
                        {"reason": reason}, ok=(202,))
    return on_storage(order_id, lambda op, by: op.resume(order_id, reason, by=by))


def pauses(as_json: AsJson = False) -> None:
    """Every service and workflow, the paused first, with who paused each, when and why."""
    listed = call_api("GET", "/pauses") if opts.api else api_shape(_control().list())
    rows = [{**p, "State": "paused" if p["Paused"] else "running"} for p in listed["Pauses"]]
    print_rows(rows, ("Kind", "Name", "State", "Since", "By", "Reason"), as_json)


def _control() -> PauseControl:
    return opts.container().operator.pauses


def _act(suffix: str, kind: str, name: str, reason: str,
         act: Callable[[PauseControl, str], BaseModel]) -> dict[str, Any]:
    """Through the operator API with --api, else straight to storage as whoever holds the
    storage role; each refusal said in a line."""
    if opts.api:
        path = f"/pauses/{quote(kind, safe='')}/{quote(name, safe='')}{suffix}"
        return call_api("POST", path, {"reason": reason})
    try:
        return api_shape(act(_control(), cli_operator()))
    except (UnknownTarget, ValueError) as e:  # no such target, or no reason given
        raise CliError(str(e), 2) from None
    except PauseRefused as e:
        raise CliError(str(e)) from None


def _say(view: dict[str, Any], as_json: bool, line: str) -> None:
    if as_json:
        print(json.dumps(view))
        return
    out().print(inert(line))
