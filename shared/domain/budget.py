"""Size budgets of what the app stores and sends, and the one way to hold text to them.

Table Storage counts a string property in UTF-16 code units (32K at most, 64 KiB a property),
so a budget is in those units: a character outside the Basic Multilingual Plane counts two.
Every text that comes from outside (a remote service's error body, an operator's reason) or
grows (a record's history) is held to its budget here before it is written. The budgets and
the limits they serve: docs/limits.md.
"""

from __future__ import annotations

import json
from typing import Any

# Table Storage's limit on one string property (64 KiB of UTF-16), which no budget may reach.
STRING_PROPERTY = 32_768
# Any one error text kept on a record, in an alert or a status message.
ERROR_TEXT = 2_000
# An operator's reason for a resubmission.
REASON_TEXT = 1_000
# A record's whole history (its JSON): the oldest entries go first.
HISTORY = 16_000
# A record's event timeline (its JSON), likewise.
TIMELINE = 24_000

_MARK = " [cut]"


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def clip(text: str, units: int) -> str:
    """``text`` itself when it fits in ``units`` UTF-16 code units; else its start, marked as
    cut, that fits (never half of a surrogate pair)."""
    if utf16_units(text) <= units:
        return text
    room = units - len(_MARK)
    out: list[str] = []
    for ch in text:
        room -= 2 if ord(ch) > 0xFFFF else 1
        if room < 0:
            break
        out.append(ch)
    return "".join(out) + _MARK


def clip_error(text: str | None) -> str | None:
    return None if text is None else clip(text, ERROR_TEXT)


def json_units(value: Any) -> int:
    """The UTF-16 units of ``value`` stored as JSON the way the state store writes it."""
    return utf16_units(json.dumps(value, ensure_ascii=False))


def newest_within(entries: list[dict[str, Any]], units: int) -> list[dict[str, Any]]:
    """The newest entries whose JSON fits in ``units`` (the oldest are dropped first)."""
    kept = list(entries)
    while kept and json_units(kept) > units:
        kept.pop(0)
    return kept
