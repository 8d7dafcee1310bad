"""A failure the CLI says in one line, with the exit code it ends on (`run` prints it)."""

from __future__ import annotations


class CliError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]
