"""`orders` (the console script) and `python -m orderctl`: the CLI, once the app's declarations
import. One that the app cannot run (a workflow declared wrongly) is said in one line: the CLI's
commands are the app's, so none can run without them."""

from __future__ import annotations

import sys


def cli() -> None:
    from shared.domain.declarations import DeclarationError

    try:
        from orderctl.main import run
    except DeclarationError as e:
        print(f"error: {e.for_a_person()}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(run())


if __name__ == "__main__":
    cli()
