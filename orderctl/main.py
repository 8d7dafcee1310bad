"""`orders`: send orders and operate the pipeline, locally or against Azure.

Storage comes from --storage (a connection string), --account (a storage account reached with
your Entra ID), or else the AzureWebJobsStorage setting (environment, then local.settings.json),
or else local Azurite. Table and queue names come from the same settings as the app's.

`resubmit`, `cancel`, `pause`, `resume`, `pauses`, `redrive`, `redrives`, `alerts ack` and
`health` go through the operator API when --api (ORDERS_API_URL) names it: as you, with an
Entra ID access token for the app (--token or ORDERS_API_TOKEN; `az account get-access-token
--resource api://<client id>`), checked for the route's role, and who acted is kept with the
change. Against a local host with OperatorDevelopmentRoles no token is needed. Without --api
they act on storage directly (your storage role is the check) and record the identity storage
accepted (--account: your Entra ID); with a storage key, only your login name, marked as not an
identity.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from azure.core.exceptions import AzureError
from azure.servicebus.exceptions import ServiceBusError

from orderctl import cancelling, orders, pausing, pipeline, redriving, sending
from orderctl.connection import ROOT, opts
from orderctl.errors import CliError, first_line
from orderctl.output import err, print_error
from shared import tracing
from shared.adapters.state_entity import CorruptRecord
from shared.handlers.failures import describe, without_python
from shared.settings import SettingsError

app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False)


@app.callback()
def main(
    storage: Annotated[str | None, typer.Option(
        help="Storage connection string (default: AzureWebJobsStorage, else local Azurite).")
    ] = None,
    account: Annotated[str | None, typer.Option(
        help="Storage account name, reached with your Entra ID (az login).")] = None,
    settings: Annotated[Path, typer.Option(
        help="local.settings.json to read app settings from.",
        # As a user types it, not the clone's absolute path (which depends on where it lies).
        show_default="./local.settings.json")] = ROOT / "local.settings.json",
    api: Annotated[str | None, typer.Option(
        envvar="ORDERS_API_URL",
        help="The operator API (https://<app>.azurewebsites.net/api): resubmit through it, "
             "as you.")] = None,
    token: Annotated[str | None, typer.Option(
        envvar="ORDERS_API_TOKEN", show_default=False,
        help="An Entra ID access token for the operator API (az account get-access-token "
             "--resource api://<client id> --query accessToken -o tsv).")] = None,
) -> None:
    opts.configure(storage, account, settings, api, token)


# --help lists the commands in the order registered here, the groups after them.
app.command()(sending.send)
app.command()(orders.status)
app.command("list")(orders.list_)
app.command()(sending.watch)
app.command()(orders.resubmit)
app.command()(cancelling.cancel)
app.command()(pausing.pause)
app.command()(pausing.resume)
app.command()(pausing.pauses)
app.command()(redriving.redrive)
redrives_app = typer.Typer(no_args_is_help=False)
app.add_typer(redrives_app, name="redrives")
redrives_app.callback(invoke_without_command=True)(redriving.redrives)
redrives_app.command("show")(redriving.show)
redrives_app.command("pause")(redriving.pause)
redrives_app.command("resume")(redriving.resume)
redrives_app.command("cancel")(redriving.cancel)
app.command()(pipeline.health)
alerts_app = typer.Typer(no_args_is_help=False)
app.add_typer(alerts_app, name="alerts")
alerts_app.callback(invoke_without_command=True)(pipeline.alerts)
alerts_app.command("ack")(pipeline.alerts_ack)
app.command()(pipeline.rejected)
app.command()(orders.trace)


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
        print_error(f"{e}")
        return e.code
    except SettingsError as e:
        print_error(f"{e}")
        return 2
    except ServiceBusError as e:  # unreachable namespace, no rights, no such queue
        print_error(f"Service Bus: {without_python(first_line(e))}")
        return 2
    except AzureError as e:  # storage unreachable, refusing, or not letting us in
        print_error(f"storage {describe(e)}")
        return 2
    except CorruptRecord as e:
        print_error(f"the state record of order {e.order_id} is unreadable by "
                    f"this version: {without_python(e.reason)}")
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
            print_error(f"{e}")
        return int(getattr(e, "exit_code", 2))
    except Exception as e:  # a failure nobody foresaw: one line, the traceback on request
        if os.environ.get("ORDERS_DEBUG"):
            raise
        print_error(f"something went wrong that the CLI cannot say more precisely "
                    f"({without_python(first_line(e)) or 'no detail'}); run it again with "
                    "ORDERS_DEBUG=1 to see where")
        return 1
    finally:
        if provider is not None:
            provider.force_flush()  # type: ignore[attr-defined]
        opts.close()


def cli() -> None:
    """The console script of an environment installed when `orders` ran this (until `make`
    installs it again): the CLI, its declarations having imported."""
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
