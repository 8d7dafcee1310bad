"""What the app says of a workflow, step, service or limit declared in a way it cannot run."""

from __future__ import annotations


class DeclarationError(ValueError):
    """A declaration the app cannot run: the message names it and says what to change. The
    commands a developer runs after changing one (the demo, the local host, the contracts
    script, the `orders` CLI) print it as one line, without a traceback."""

    def for_a_person(self) -> str:
        """The line a developer reads: what is wrong, and where declarations live."""
        return f"{self} (the app's declarations: shared/workflows/, docs/adapting.md)"
