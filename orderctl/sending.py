"""Orders in and followed: `orders send` (samples or a file, to Service Bus or the local
channel) and `orders watch` (until each is settled, rejected or refused as a conflict)."""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from azure.core.exceptions import AzureError, HttpResponseError
from azure.servicebus.exceptions import MessageSizeExceededError, ServiceBusError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orderctl.connection import opts
from orderctl.errors import CliError, first_line
from orderctl.output import api_shape, err, id_column, inert, out, print_error
from orderctl.samples import NoSamples, orders_from_file, sample_orders
from orderctl.senders import LocalSender, OrderSender, ServiceBusSender
from shared.domain import senders
from shared.domain.senders import Sender
from shared.domain.state import OrderState
from shared.handlers.failures import describe, without_python
from shared.handlers.operator import Operator
from shared.workflows import REGISTRY


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
    sender_name: Annotated[str | None, typer.Option(
        "--sender", metavar="NAME",
        help="Send as this declared sender (the Senders setting), on its own queue: the ids "
             "printed are the ones the app keeps its orders under (NAME~id).")] = None,
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
    as_sender = senders.DEFAULT
    if sender_name is not None:
        if queue is not None:
            raise CliError("choose one of --queue or --sender", 2)
        if not re.fullmatch(senders.SENDER_PATTERN, sender_name):
            raise CliError(f"--sender: {inert(sender_name[:40])!r} is not a sender's name (a "
                           "lower-case letter, then up to 19 lower-case letters or digits)", 2)
        as_sender = Sender(sender_name)
    orders_queue = queue or (as_sender.orders_queue if as_sender.named
                             else opts.env().get("OrdersQueueName", "orders"))
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
                    print_error(f"order {item[0] or f'number {i + 1}'} not sent: {why}")
                continue
            ids = [as_sender.record_id(mid) for mid in ids]
            sent += ids
            if not as_json:
                for mid in ids:
                    print(inert(mid), flush=True)
    except (AzureError, ServiceBusError) as e:
        if not as_json:
            raise
        # A script still learns what went before the channel failed: the JSON, then the line.
        stopped = CliError(f"Service Bus: {without_python(first_line(e))}"
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


def _settled(s: OrderState | None) -> bool:
    return s is not None and s.is_settled


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
        help="An order already settled, or rejected, at the first look may be a resend of its "
             "id: wait this many seconds for intake to refuse it if its content differs, or "
             "to take it.")] = 5.0,
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
    began = time.monotonic()
    deadline = began + timeout
    # A resend of an id whose order is settled reads as that order's state until intake has
    # read it; only a refusal (a conflict) says otherwise, and a resend of the same content
    # leaves no trace. So an order settled at the first look is watched a while longer; and
    # likewise an id intake had rejected before: the order sent now may be its corrected
    # resend, which intake has yet to read (the rejection row is the earlier message's).
    resend_deadline = began + min(resend_wait, timeout)
    states: dict[str, OrderState | None] = {}
    rejected: dict[str, dict[str, Any]] = {}  # id -> intake's rejection row (or its conflict)
    finished: set[str] = set()  # settled, and no conflict to wait for
    settled_at_first_look: set[str] = set()
    rejected_at_first_look: set[str] = set()

    def look(oid: str) -> None:
        first = oid not in states
        s = states[oid] = store.get_state(oid)
        if s is None:
            if (r := _rejection(operator, oid)) is not None:
                if first:
                    rejected_at_first_look.add(oid)
                if oid not in rejected_at_first_look or time.monotonic() >= resend_deadline:
                    rejected[oid] = r
            return
        if not s.is_settled:
            return
        if first:
            settled_at_first_look.add(oid)
        r = _rejection(operator, oid)
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
    # Out of time while waiting to see whether an order settled at the first look was sent
    # again (its last look may have come before the wait ended, when storage answers slowly):
    # looked at once more, the wait over.
    for oid in settled_at_first_look - finished - set(rejected):
        look(oid)
    # Out of time while waiting to see whether a rejected id was sent again: it was not (or
    # not in time), so the rejection is what there is to say of it.
    for oid in rejected_at_first_look:
        if (states.get(oid) is None and oid not in rejected
                and (r := _rejection(operator, oid)) is not None):
            rejected[oid] = r
    done = len(finished) + len(rejected)
    if as_json:
        print(json.dumps({"orders": [_watched(oid, states.get(oid), rejected.get(oid))
                                     for oid in ids],
                          "settled": len(finished), "rejected": len(rejected),
                          "not_settled": len(ids) - done}, default=str))
    else:
        t = Table(id_column("order", inert(ids)), "state", "failures", "last error")
        for oid in ids:
            s, r = states.get(oid), rejected.get(oid)
            if r is not None:
                t.add_row(*inert([oid, _watch_state(s, r), str(s.failure_count) if s else "",
                                  f"{r['Kind']}: {r['Reason']}"
                                  + (f" (the stored order: {s.process_state.value})"
                                     if s else "")]))
                continue
            t.add_row(*inert([oid, s.process_state.value if s else "not received",
                              str(s.failure_count) if s else "",
                              (s.last_error or "") if s else ""]))
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


def _rejection(operator: Operator, oid: str) -> dict[str, Any] | None:
    r = operator.rejection(oid)
    return None if r is None else api_shape(r)


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
