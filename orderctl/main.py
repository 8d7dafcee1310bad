"""`orders`: send orders and operate the pipeline, locally or against Azure.

Storage comes from --storage (a connection string), --account (a storage account reached with
your Entra ID), or else the AzureWebJobsStorage setting (environment, then local.settings.json),
or else local Azurite. Table and queue names come from the same settings as the app's.

`resubmit` goes through the operator API when --api (ORDERS_API_URL) names it: as you, with an
Entra ID access token for the app (--token or ORDERS_API_TOKEN; `az account get-access-token
--resource api://<client id>`), checked for the Orders.Resubmit role and kept in the order's
history. Against a local host with OperatorDevelopmentRoles no token is needed. Without --api it
writes to storage directly (your storage role is the check), and records your login name.
"""

from __future__ import annotations

import getpass
import inspect
import json
import logging
import os
import re
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer
from azure.core.exceptions import AzureError, HttpResponseError
from azure.servicebus.exceptions import MessageSizeExceededError, ServiceBusError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table

from orderctl.samples import NoSamples, orders_from_file, sample_orders
from orderctl.senders import LocalSender, OrderSender, ServiceBusSender
from shared import bootstrap, tracing
from shared.adapters.state_store import CorruptRecord
from shared.domain.state import OrderState
from shared.handlers.failures import describe, plain
from shared.handlers.operator import (
    MAX_BULK,
    AckRefused,
    AlertNotFound,
    BulkResubmitRequest,
    OrderNotFound,
    ResubmitRefused,
)
from shared.settings import SettingsError, load_settings
from shared.workflows import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False)


class CliError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _Options:
    storage: str | None = None
    account: str | None = None
    settings_file: Path = ROOT / "local.settings.json"
    api: str | None = None
    token: str | None = None
    _container: bootstrap.Container | None = None

    def env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        if self.settings_file.exists():
            env.update({k: str(v) for k, v in
                        json.loads(self.settings_file.read_text()).get("Values", {}).items()})
        env.update(os.environ)
        if self.storage:
            env["AzureWebJobsStorage"] = self.storage
            env.pop("AzureWebJobsStorage__accountName", None)
        elif self.account:
            env["AzureWebJobsStorage__accountName"] = self.account
            env.pop("AzureWebJobsStorage", None)
        elif not env.get("AzureWebJobsStorage") and not env.get(
                "AzureWebJobsStorage__accountName"):
            env["AzureWebJobsStorage"] = "UseDevelopmentStorage=true"
        return env

    def container(self) -> bootstrap.Container:
        if self._container is None:
            try:
                settings = load_settings(self.env())
                # One quick retry: a CLI should say "unreachable" in seconds, not minutes.
                # (The queue client's own retry policy waits 15 s before its first retry.)
                self._container = bootstrap.build(
                    settings, workflows=REGISTRY,
                    table_options={"retry_total": 1, "retry_backoff_factor": 0.2},
                    queue_options={"retry_total": 1, "initial_backoff": 0.5,
                                   "increment_base": 2})
            except ValueError as e:
                raise CliError(f"storage connection string is malformed: {e}", 2) from None
        return self._container


opts = _Options()


def out() -> Console:
    return Console(file=sys.stdout, highlight=False)


def err() -> Console:
    # soft_wrap: an error stays one line, however narrow the terminal.
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


@app.callback()
def main(
    storage: Annotated[str | None, typer.Option(
        help="Storage connection string (default: AzureWebJobsStorage, else local Azurite).")
    ] = None,
    account: Annotated[str | None, typer.Option(
        help="Storage account name, reached with your Entra ID (az login).")] = None,
    settings: Annotated[Path, typer.Option(
        help="local.settings.json to read app settings from.")] = ROOT / "local.settings.json",
    api: Annotated[str | None, typer.Option(
        envvar="ORDERS_API_URL",
        help="The operator API (https://<app>.azurewebsites.net/api): resubmit through it, "
             "as you.")] = None,
    token: Annotated[str | None, typer.Option(
        envvar="ORDERS_API_TOKEN", show_default=False,
        help="An Entra ID access token for the operator API (az account get-access-token "
             "--resource api://<client id> --query accessToken -o tsv).")] = None,
) -> None:
    opts.storage, opts.account, opts.settings_file = storage, account, settings
    opts.api, opts.token = api, token
    opts._container = None


@app.command()
def send(
    local: Annotated[bool, typer.Option("--local", help="Send to the local stand-in channel "
                                        "(Azurite) that `make demo` and localrun read.")] = False,
    connection_string: Annotated[str | None, typer.Option(
        envvar="SERVICEBUS_CONNECTION_STRING", help="Service Bus connection string.")] = None,
    namespace: Annotated[str | None, typer.Option(
        envvar="SERVICEBUS_NAMESPACE",
        help="Service Bus namespace, reached with your Entra ID (DefaultAzureCredential).")
    ] = None,
    queue: Annotated[str | None, typer.Option(
        help="Queue name (default: the OrdersQueueName setting).")] = None,
    # A short metavar: typer's own ("<float range> [x>=0.1]") narrows the help column until
    # an environment variable's name is cut at 80 columns.
    count: Annotated[int, typer.Option(
        min=1, metavar="N", help="How many sample orders to generate.")] = 1,
    rate: Annotated[float | None, typer.Option(
        min=0.1, metavar="N", help="Orders per second (default: as fast as possible).")
    ] = None,
    file: Annotated[Path | None, typer.Option(
        exists=True, dir_okay=False, help="Send these orders (JSON lines) instead of samples.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Make the sample orders reproducible.")] = None,
    reply_to: Annotated[str | None, typer.Option(
        help="Reply queue for status messages (must match ReplyQueueAllowList).")] = None,
    workflow: Annotated[list[str] | None, typer.Option(
        metavar="NAME",
        help="The workflow the sample orders follow (repeat it to take turns); default: the "
             f"app's ({REGISTRY.default}). The app runs: {', '.join(REGISTRY.names)}.")
    ] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object at the end: the ids sent, and each order that "
                       "could not be sent with why (`orders watch -` reads it too).")] = False,
) -> None:
    """Send orders; prints each order id sent (message id = order id).

    An order the channel refuses on its own (too large for it) is said and skipped; the
    others are still sent, and the exit code is 1. A channel that cannot be reached stops
    the send (exit 2).
    """
    if sum(bool(x) for x in (local, connection_string, namespace)) != 1:
        raise CliError("choose one of --local, --connection-string or --namespace", 2)
    unknown = sorted(set(workflow or []) - set(REGISTRY.names))
    if unknown:
        raise CliError(f"--workflow: no workflow {', '.join(unknown)} (this app runs "
                       f"{', '.join(REGISTRY.names)})", 2)
    orders_queue = queue or opts.env().get("OrdersQueueName", "orders")
    sender: OrderSender
    if local:
        sender = LocalSender(opts.container().queues, orders_queue)
    else:
        try:
            sender = ServiceBusSender(orders_queue, connection_string=connection_string,
                                      namespace=namespace)
        except ValueError as e:  # the SDK's word for a malformed connection string
            raise CliError(f"--connection-string: {e}", 2) from None
    try:
        items = (list(orders_from_file(file)) if file else
                 [(o["order_id"], json.dumps(o).encode()) for o in sample_orders(
                     count, seed=seed, reply_to=reply_to, workflows=workflow)])
    except NoSamples as e:
        raise CliError(f"--workflow: {e}", 2) from None
    started = time.monotonic()
    sent: list[str] = []
    failed: list[dict[str, Any]] = []
    stopped: CliError | None = None
    try:
        for i, item in enumerate(items):
            if rate:
                # Pace the load: send number i at i/rate seconds after the start.
                time.sleep(max(0.0, started + i / rate - time.monotonic()))
            try:
                ids = sender.send([item])
            except (AzureError, ServiceBusError) as e:
                why = _refused_message(e)
                if why is None:
                    raise
                failed.append({"order_id": item[0], "position": i + 1, "error": why})
                if not as_json:
                    err().print(f"[red]error:[/] order {item[0] or f'number {i + 1}'} not "
                                f"sent: {why}")
                continue
            sent += ids
            if not as_json:
                for mid in ids:
                    print(mid, flush=True)
    except (AzureError, ServiceBusError) as e:
        if not as_json:
            raise
        # A script still learns what went before the channel failed: the JSON, then the line.
        stopped = CliError(f"Service Bus: {plain(_first_line(e))}"
                           if isinstance(e, ServiceBusError) else f"storage {describe(e)}", 2)
    finally:
        sender.close()
    if as_json:
        print(json.dumps({"queue": orders_queue, "sent": sent, "failed": failed,
                          "stopped": str(stopped) if stopped else None}), flush=True)
    if stopped:
        raise stopped
    err().print(f"sent {len(sent)} order(s) to {orders_queue!r} in "
                f"{time.monotonic() - started:.1f}s"
                + (f"; {len(failed)} not sent" if failed else ""))
    if failed:
        raise typer.Exit(1)


def _refused_message(e: Exception) -> str | None:
    """Why the channel refused this one message (the others may go), or None when the
    channel itself failed (unreachable, not letting us in) and nothing more can be sent."""
    if isinstance(e, MessageSizeExceededError):
        return "too large for Service Bus (MessageSizeExceeded)"
    if isinstance(e, HttpResponseError) and (
            e.status_code == 413 or getattr(e, "error_code", None) in (
                "RequestBodyTooLarge", "MessageTooLarge")):
        return f"too large for the local channel's queue ({describe(e)})"
    return None


def _step_table(view: dict[str, Any]) -> Table:
    t = Table("step", "status", "attempt", "complete by", "last error", box=None)
    for s in view["Steps"]:
        t.add_row(s["name"], s["status"], str(s["attempt"]), s["complete_by"] or "",
                  s["last_error"] or "")
    return t


@app.command()
def status(order_id: str,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show an order's state record, each step with its attempts and last error."""
    try:
        view = opts.container().operator.get(order_id)
    except OrderNotFound:
        raise CliError(f"no order {order_id!r}") from None
    except ValueError as e:  # not an order id
        raise CliError(str(e), 2) from None
    if as_json:
        print(json.dumps(view, indent=2, default=str))
        return
    c = out()
    c.print(f"[bold]{view['OrderID']}[/]  {view['ProcessState']}"
            + (f"  compensation {view['Compensation']}" if view["Compensation"] else ""))
    # The version the order started on: the steps it follows, whatever the latest is.
    c.print(f"  Workflow: {view['Workflow'] or 'the default'} v{view.get('WorkflowVersion') or 1}")
    for k in ("LockedBy", "CompleteBy", "FailureCount", "Resubmissions", "LastError",
              "CreatedAt", "UpdatedAt"):
        c.print(f"  {k}: {view[k]}")
    c.print(_step_table(view))
    for h in view["History"]:
        c.print(f"  earlier: {h['at']} resubmitted ({h.get('reason') or 'no reason'}); "
                f"was: {h.get('previous_error')}")


@app.command("list")
def list_(
    state: Annotated[str | None, typer.Option(
        help="Pending, Processing, Processed or Error.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Orders per page.")] = 20,
    continuation: Annotated[str | None, typer.Option(help="Token from the previous page.")
                            ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List orders, optionally of one state, a page at a time."""
    try:
        page = opts.container().operator.list(state, limit, continuation)
    except ValueError as e:
        raise CliError(str(e), 2) from None
    if as_json:
        print(json.dumps({"orders": page.items, "continuation": page.continuation}, default=str))
        return
    t = Table(_id_column("order", [o["OrderID"] for o in page.items]), "state", "failures",
              "current step", "last error", "updated")
    for o in page.items:
        t.add_row(o["OrderID"], o["ProcessState"] + (f"/{o['Compensation']}" if o["Compensation"]
                                                     else ""),
                  str(o["FailureCount"]), o["CurrentStep"] or "", o["LastError"] or "",
                  o["UpdatedAt"])
    out().print(t)
    if page.continuation:
        err().print(f"more: --continuation {page.continuation}")


def _settled(s: OrderState | None) -> bool:
    return s is not None and s.is_settled


@app.command()
def watch(
    order_ids: Annotated[list[str] | None, typer.Argument(
        help="Order ids; '-' reads them from standard input, one a line, or the JSON of "
             "`orders send --json`.")] = None,
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 600,
    interval: Annotated[float, typer.Option(help="Seconds between looks.")] = 1.0,
    as_json: Annotated[bool, typer.Option(
        "--json", help="No progress bar; at the end one JSON object: each order's state, "
                       "failures, last error, and why intake rejected it.")] = False,
    resend_wait: Annotated[float, typer.Option(
        help="An order already settled at the first look may be a resend of its id: wait "
             "this many seconds for intake to refuse it if its content differs.")] = 5.0,
) -> None:
    """Follow orders live until each is settled (Processed, or Error with compensation done).

    Exits 1 when an order is not settled in time, intake rejected it, or it was sent again
    with different content (a conflict: intake keeps the first order and refuses the other).
    """
    ids = list(dict.fromkeys(order_ids or []))
    if ids == ["-"]:
        ids = list(dict.fromkeys(_ids_from(sys.stdin.read())))
    if not ids:
        raise CliError("no order ids given", 2)
    store, operator = opts.container().store, opts.container().operator
    deadline = time.monotonic() + timeout
    # A resend of an id whose order is settled reads as that order's state until intake has
    # read it; only a refusal (a conflict) says otherwise, and a resend of the same content
    # leaves no trace. So an order settled at the first look is watched a while longer.
    resend_deadline = time.monotonic() + min(resend_wait, timeout)
    states: dict[str, OrderState | None] = {}
    rejected: dict[str, dict[str, Any]] = {}  # id -> intake's rejection row (or its conflict)
    finished: set[str] = set()  # settled, and no conflict to wait for
    settled_at_first_look: set[str] = set()

    def look(oid: str) -> None:
        first = oid not in states
        s = states[oid] = store.get_state(oid)
        if s is None:
            if (r := operator.rejection(oid)) is not None:
                rejected[oid] = r
            return
        if not s.is_settled:
            return
        if first:
            settled_at_first_look.add(oid)
        r = operator.rejection(oid)
        if r is not None and r["Kind"] == "conflict":
            rejected[oid] = r
        elif oid not in settled_at_first_look or time.monotonic() >= resend_deadline:
            finished.add(oid)

    # The first look before the progress bar: storage that cannot be reached is then one line,
    # not a bar left half-drawn above it.
    look(ids[0])
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err(), disable=as_json) as progress:
        task = progress.add_task("waiting", total=len(ids))
        while True:
            for oid in ids:
                if oid not in finished and oid not in rejected:
                    look(oid)
            by_state = Counter(_watch_state(states.get(oid), rejected.get(oid))
                               for oid in states)
            done = len(finished) + len(rejected)
            progress.update(task, completed=done, description=", ".join(
                f"{k} {v}" for k, v in sorted(by_state.items())))
            if done == len(ids) or time.monotonic() > deadline:
                break
            time.sleep(interval)
    if as_json:
        print(json.dumps({"orders": [_watched(oid, states.get(oid), rejected.get(oid))
                                     for oid in ids],
                          "settled": len(finished), "rejected": len(rejected),
                          "not_settled": len(ids) - done}, default=str))
    else:
        t = Table(_id_column("order", ids), "state", "failures", "last error")
        for oid in ids:
            s, r = states.get(oid), rejected.get(oid)
            if r is not None:
                t.add_row(oid, _watch_state(s, r), str(s.failure_count) if s else "",
                          f"{r['Kind']}: {r['Reason']}"
                          + (f" (the stored order: {s.process_state.value})" if s else ""))
                continue
            t.add_row(oid, s.process_state.value if s else "not received",
                      str(s.failure_count) if s else "", (s.last_error or "") if s else "")
        out().print(t)
    problems = []
    if done < len(ids):
        problems.append(f"{len(ids) - done} order(s) not settled after {timeout:.0f}s")
    conflicts = sum(states.get(oid) is not None for oid in rejected)
    if conflicts:
        problems.append(f"{conflicts} order(s) sent again with different content: refused, "
                        "the first one kept")
    if len(rejected) > conflicts:
        problems.append(f"{len(rejected) - conflicts} message(s) rejected at intake")
    if problems:
        raise CliError("; ".join(problems) + (
            " (see the table, or `orders rejected`)" if rejected else ""))


def _watch_state(s: OrderState | None, rejection: dict[str, Any] | None) -> str:
    if rejection is not None:
        return "conflict" if s is not None else "rejected"
    return s.process_state.value if s else "not yet received"


def _ids_from(text: str) -> list[str]:
    """Order ids from standard input: one a line, or what `orders send --json` printed."""
    try:
        doc = json.loads(text)
    except ValueError:
        return [line.strip() for line in text.splitlines() if line.strip()]
    if isinstance(doc, dict) and isinstance(doc.get("sent"), list):
        return [str(i) for i in doc["sent"]]
    return [line.strip() for line in text.splitlines() if line.strip()]


def _watched(oid: str, s: OrderState | None, rejection: dict[str, Any] | None
             ) -> dict[str, Any]:
    """One order as `watch --json` says it: the same facts as its table, in fields."""
    return {
        "order_id": oid,
        "state": ("not received" if s is None and rejection is None
                  else _watch_state(s, rejection)),
        "settled": rejection is None and _settled(s),
        "compensation": s.compensation.value if s and s.compensation else None,
        "failures": s.failure_count if s else None,
        "last_error": s.last_error if s else None,
        "rejected": ({"kind": str(rejection["Kind"]), "reason": rejection["Reason"],
                      "at": rejection["RejectedAt"]} if rejection else None),
    }


@app.command()
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
        try:
            # Straight to storage: whoever holds the storage role (_cli_operator says who).
            view = opts.container().operator.resubmit(order_id, reason, force,
                                                      by=_cli_operator())
        except OrderNotFound:
            raise CliError(f"no order {order_id!r}") from None
        except ValueError as e:  # not an order id, or a reason too long to keep
            raise CliError(str(e), 2) from None
        except ResubmitRefused as e:
            raise CliError(str(e)) from None
    if as_json:
        print(json.dumps(view))
        return
    out().print(f"{order_id} resubmitted: {view['ProcessState']} "
                f"(resubmission {view['Resubmissions']})")


def _cli_operator() -> str:
    """Who acts, for the order's history or the alert: with Entra ID (--account, or the
    setting's account name), the signed-in identity from its token; with a storage key or
    connection string (Azurite, say), the key is all storage knows, so the login name is
    recorded as no more than that."""
    env = opts.env()
    if env.get("AzureWebJobsStorage") or not env.get("AzureWebJobsStorage__accountName"):
        return f"{getpass.getuser()} (orders CLI, storage key: not an identity)"
    from azure.identity import DefaultAzureCredential

    try:
        token = DefaultAzureCredential().get_token("https://storage.azure.com/.default").token
    except Exception as e:  # the SDK has many ways of saying "not signed in"
        raise CliError(f"cannot tell who you are (az login?): {_first_line(e)}", 2) from None
    return identity_of(token)


def identity_of(token: str) -> str:
    """The signed-in identity an Entra ID access token names (its name, sign-in name and object
    id), as the operator API records a principal. The token is the one the SDK was just given
    for this user; storage checks it, so it is read here without checking it again."""
    import base64

    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        raise CliError("the access token names nobody: cannot record who acts", 2) from None
    who = claims.get("upn") or claims.get("preferred_username") or claims.get("unique_name")
    name = claims.get("name") or who or "an Entra ID identity"
    return f"{name} ({who or 'app'}; oid {claims.get('oid', '?')}; orders CLI, storage)"


def _when(value: str | None, option: str) -> str | None:
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
    body = {"state": state, "since": _when(since, "--since"), "until": _when(until, "--until"),
            "failed_step": failed_step, "reason": reason, "force": force, "dry_run": dry_run,
            "limit": limit}
    if opts.api:
        result = _call_api("POST", "/resubmissions", body, ok=(200, 202))
    else:
        try:
            ask = BulkResubmitRequest.from_body(json.dumps(body).encode())
        except ValueError as e:
            raise CliError(str(e), 2) from None
        result = opts.container().operator.resubmit_many(ask, by=_cli_operator())
    if as_json:
        print(json.dumps(result))
    else:
        t = Table(_id_column("order", [i["OrderID"] for i in result["Items"]]), "failed step",
                  "failed", "outcome", "why / last error")
        for i in result["Items"]:
            t.add_row(i["OrderID"], i["FailedStep"] or "", i["UpdatedAt"], i["Outcome"],
                      i["Why"] or i["LastError"] or "")
        out().print(t)
        verb = "would be resubmitted" if dry_run else "resubmitted"
        done = sum(i["Outcome"] != "refused" for i in result["Items"])
        skipped = result.get("Skipped") or 0
        err().print(f"{done} order(s) {verb}, {len(result['Items']) - done} refused"
                    + (f"; {skipped} more match that a resubmit would refuse (compensation "
                       "failed: --force; or not settled), not picked" if skipped else "")
                    + ("; more match than this batch (--limit), or than one request reads: "
                       "run it again once these are done" if result["More"] else "")
                    + (" (dry run: nothing was changed)" if dry_run else ""))
    if any(i["Outcome"] == "refused" for i in result["Items"]):
        raise typer.Exit(1)


def _resubmit_through_api(order_id: str, reason: str, force: bool) -> dict[str, Any]:
    """POST /orders/{id}/resubmit as the token's holder; the API's refusal, said as it said it."""
    return _call_api("POST", f"/orders/{quote(order_id, safe='')}/resubmit",
                     {"reason": reason, "force": force}, ok=(202,))


def _call_api(method: str, path: str, body: Any = None,
              ok: tuple[int, ...] = (200,)) -> dict[str, Any]:
    """One call to the operator API as the token's holder: the answer's JSON, or a CliError
    saying what the API said (its error text, one line), never the HTTP client's internals."""
    assert opts.api
    headers = {"Authorization": f"Bearer {opts.token}"} if opts.token else {}
    try:
        r = httpx.request(method, opts.api.rstrip("/") + path, json=body, headers=headers,
                          timeout=30, follow_redirects=False)
    except httpx.HTTPError as e:
        raise CliError(f"cannot reach the operator API at {opts.api}: "
                       f"{plain(_first_line(e)) or 'no connection'}", 2) from None
    try:
        answer = r.json()
    except ValueError:
        answer = None
    message = answer.get("error") if isinstance(answer, dict) else None
    if r.status_code in ok and isinstance(answer, dict):
        return answer
    if r.status_code == 401:
        hint = "" if opts.token else (
            " (no token given: pass --token or set ORDERS_API_TOKEN to an access token for "
            "api://<client id>)")
        raise CliError(f"not signed in: {message or 'the operator API refused the request'}"
                       f"{hint}", 2)
    if r.status_code in (400, 403):
        raise CliError(message or f"the operator API answered HTTP {r.status_code}", 2)
    raise CliError(message or f"the operator API answered HTTP {r.status_code}")


@app.command()
def health(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Whether storage answers, each remote service's circuit breaker, the last Supervisor
    tick and the backlog of each queue the app reads. Exits 1 when unhealthy or the
    Supervisor is late."""
    if opts.api:
        report = _call_api("GET", "/health/details", ok=(200, 503))
    else:
        report = opts.container().operator.health(detailed=True)
        # This process's breakers are not the app's: only the app can say (--api).
        report["breakers"] = None
    if as_json:
        print(json.dumps(report))
    else:
        _print_health(report)
    sup = report["supervisor"]
    if report["status"] != "ok" or sup["late"]:
        raise CliError("unhealthy: " + "; ".join(
            [f"{k}: {v}" for k, v in report["checks"].items() if v != "ok"]
            + ([f"Supervisor: {sup['problem']}"] if sup["problem"] else [])))


def _print_health(report: dict[str, Any]) -> None:
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


alerts_app = typer.Typer(no_args_is_help=False)
app.add_typer(alerts_app, name="alerts")


@alerts_app.callback(invoke_without_command=True)
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
           ) -> None:
    """Operator alerts: the recent ones (the last 7 days), newest first; `alerts ack`
    acknowledges one."""
    if ctx.invoked_subcommand is not None:
        return
    rows = opts.container().operator.alerts(limit, acknowledged=acknowledged)
    if as_json:
        _print_rows(rows, (), True)
        return
    columns: tuple[str, ...] = ("RaisedAt", "Kind", "OrderID", "Step", "Reason")
    if acknowledged is not False:  # who and when, in one column
        columns += ("Acknowledged",)
        rows = [{**r, "Acknowledged": f"by {r['AcknowledgedBy']} at {r['AcknowledgedAt']}"
                 if r["AcknowledgedAt"] else ""} for r in rows]
    _print_rows(rows, (("AlertId", *columns) if wide else columns), False)


@alerts_app.command("ack")
def alerts_ack(alert_id: Annotated[str, typer.Argument(
                   help="The alert's id (`orders alerts --wide` or --json shows it).")],
               note: Annotated[str, typer.Option(help="Kept on the alert with your name.")
                               ] = "",
               as_json: Annotated[bool, typer.Option(
                   "--json", help="Print the acknowledged alert as JSON.")] = False) -> None:
    """Acknowledge an alert: your name and the time are kept on it."""
    if opts.api:
        view = _call_api("POST", f"/alerts/{quote(alert_id, safe='')}/ack", {"note": note})
    else:
        try:
            view = opts.container().operator.acknowledge(
                alert_id, _cli_operator(), note)
        except AlertNotFound:
            raise CliError(f"no alert {alert_id!r}") from None
        except ValueError as e:  # not an alert id, or a note too long to keep
            raise CliError(str(e), 2) from None
        except AckRefused as e:
            raise CliError(str(e)) from None
    if as_json:
        print(json.dumps(view, default=str))
        return
    out().print(f"{alert_id} acknowledged by {view['AcknowledgedBy']} at "
                f"{view['AcknowledgedAt']}", soft_wrap=True)


@app.command()
def rejected(limit: Annotated[int, typer.Option(min=1, max=1000, help="Rows per page.")] = 20,
             continuation: Annotated[str | None, typer.Option(
                 help="Token from the previous page.")] = None,
             as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Invalid or conflicting orders that intake recorded, with the reason, newest first, a page
    at a time."""
    try:
        page = opts.container().operator.rejected(limit, continuation)
    except ValueError as e:
        raise CliError(str(e), 2) from None
    if as_json:
        print(json.dumps({"rejected": page.items, "continuation": page.continuation},
                         default=str))
        return
    _print_rows(page.items, ("RejectedAt", "Kind", "MessageId", "Reason"), False)
    if page.continuation:
        err().print(f"more: --continuation {page.continuation}")


@app.command()
def trace(order_id: str,
          as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """An order's timeline from what was recorded (state record, steps, resubmissions, alerts),
    and its trace id for a tracing backend."""
    c = opts.container()
    try:
        view = c.operator.get(order_id)
        alerts = c.operator.alerts_for(order_id)
    except ValueError as e:
        raise CliError(str(e), 2) from None
    except OrderNotFound:
        raise CliError(f"no order {order_id!r}") from None
    timeline = _timeline(view, alerts)
    if as_json:
        print(json.dumps({"order_id": order_id, "trace_id": view["TraceId"],
                          "timeline": timeline}, default=str))
        return
    t = Table(Column("when", no_wrap=True), "what")
    for row in timeline:
        t.add_row(row["at"] or "", row["what"])
    out().print(t)
    out().print(f"trace id: {view['TraceId'] or 'none (the order was not traced)'}", soft_wrap=True)


def _timeline(view: dict[str, Any], alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
        rows.append({"at": None, "what": what})
    comp = f", compensation {view['Compensation']}" if view["Compensation"] else ""
    rows.append({"at": view["UpdatedAt"], "what": f"now {view['ProcessState']}{comp}"
                 + (f": {view['LastError']}" if view["LastError"] else "")})
    return rows


def _id_column(header: str, ids: list[str]) -> Column:
    """Ids stay whole on a narrow terminal (other columns wrap instead): they get copied."""
    return Column(header, no_wrap=True, min_width=max([len(header), *map(len, ids)]))


def _print_rows(rows: list[dict[str, Any]], columns: tuple[str, ...], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, default=str))
        return
    t = Table(*(_id_column(c, [str(r.get(c) or "") for r in rows])
                if c in ("OrderID", "MessageId", "AlertId", "Kind") else c for c in columns))
    for r in rows:
        t.add_row(*(str(r.get(c) or "") for c in columns))
    out().print(t)
    if not rows:
        err().print("none")


def run(argv: list[str] | None = None) -> int:
    """Run the CLI; every known failure is one line on stderr and a non-zero exit code."""
    # The app's own log records (an operator's resubmit logs one) are not the CLI's output.
    logging.getLogger().addHandler(logging.NullHandler())
    provider = None
    try:
        # OTEL_TRACES_EXPORTER set: `send` starts each order's trace (README, Tracing).
        provider = tracing.configure()
        # Not standalone, typer returns an exit code rather than raising it: 130 after Ctrl-C.
        rv = app(args=argv, prog_name="orders", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except CliError as e:
        err().print(f"[red]error:[/] {e}")
        return e.code
    except SettingsError as e:
        err().print(f"[red]error:[/] {e}")
        return 2
    except ServiceBusError as e:  # unreachable namespace, no rights, no such queue
        err().print(f"[red]error:[/] Service Bus: {plain(_first_line(e))}")
        return 2
    except AzureError as e:  # storage unreachable, refusing, or not letting us in
        err().print(f"[red]error:[/] storage {describe(e)}")
        return 2
    except CorruptRecord as e:
        err().print(f"[red]error:[/] the state record of order {e.order_id} is unreadable by "
                    f"this version: {plain(e.reason)}")
        return 1
    except typer.Exit as e:
        return int(e.exit_code)
    except typer.Abort:
        err().print("aborted")
        return 130
    except typer.TyperException as e:  # usage errors: unknown option, missing argument
        show = getattr(e, "show", None)
        if show is not None:
            show(file=sys.stderr)
        else:
            err().print(f"[red]error:[/] {e}")
        return int(getattr(e, "exit_code", 2))
    except Exception as e:  # a failure nobody foresaw: one line, the traceback on request
        if os.environ.get("ORDERS_DEBUG"):
            raise
        err().print(f"[red]error:[/] something went wrong that the CLI cannot say more "
                    f"precisely ({plain(_first_line(e)) or 'no detail'}); run it again with "
                    "ORDERS_DEBUG=1 to see where")
        return 1
    finally:
        if provider is not None:
            provider.force_flush()  # type: ignore[attr-defined]
        if opts._container is not None:
            opts._container.close()
            opts._container = None


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]


def cli() -> None:
    """Console-script entry point (`orders`)."""
    raise SystemExit(run())


def _prose(text: str | None) -> str | None:
    """Help text as paragraphs: the docstring's line breaks inside a paragraph taken out.
    Rich keeps a hard newline where the source wrapped at 100 columns, which at 80 reads as a
    line cut mid-sentence; the terminal's own width wraps a paragraph instead."""
    if text is None:
        return None
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


def _help_as_prose(t: typer.Typer) -> None:
    """Every command's and group's help (the docstring unless given) as _prose."""
    t.info.help = _prose(t.info.help if isinstance(t.info.help, str) else None)
    for c in t.registered_commands:
        c.help = _prose(c.help or (c.callback.__doc__ if c.callback else None))
    if t.registered_callback is not None:
        cb = t.registered_callback
        text = _prose(cb.help if isinstance(cb.help, str) else
                      cb.callback.__doc__ if cb.callback else None)
        if text is not None:  # else the group's own help stands (typer's placeholder)
            cb.help = text
    for g in t.registered_groups:
        if g.typer_instance is not None:
            _help_as_prose(g.typer_instance)


_help_as_prose(app)
