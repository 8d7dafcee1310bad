"""Size budgets of what the app stores and sends, and the one way to hold text to them.

Table Storage counts a string in UTF-16 code units, and every text is stored inside JSON, so a
text's budget counts the units of its JSON form (``text_units``). Every text that comes from
outside or grows is held to its budget here before it is written (docs/limits.md).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

# Table Storage's limit on one string property (64 KiB of UTF-16), which no budget may reach.
STRING_PROPERTY = 32_768
# Any one error text kept on a record, in an alert or a status message.
ERROR_TEXT = 2_000
# An operator's reason for a resubmission: the API takes up to REASON_TEXT characters, and keeps
# all of them (at most six units each as JSON).
REASON_TEXT = 1_000
REASON_JSON = 6 * REASON_TEXT
# A record's whole history (its JSON): the oldest entries go first.
HISTORY = 16_000
# A record's event timeline (its JSON), likewise.
TIMELINE = 24_000
# A record's outbox (its JSON). Effects a transition can't show were carried out are carried
# into the next outbox; past this, the carried ones give up their texts first (transitions.py).
OUTBOX = 24_000
# A carried effect's text once its outbox is over budget.
SHORT_TEXT = 200
# The part of a remote service's answer an ok reply passes on (UTF-8 bytes of its JSON): a storage
# queue message holds 64 KiB, base64-encoded (48 KiB of text).
RESULT_BYTES = 16_384
# Every step's result an order's record keeps, together (UTF-8 bytes of their JSON, which is at
# least their UTF-16 units): they ride in the record's Steps property beside the steps' own
# fields, well inside its 32K units. Each step has a share (Workflow.result_budget); a result
# past it is refused at its step, never kept in part.
RESULTS = 16_384


def json_bytes(value: Any) -> int:
    """The UTF-8 bytes of ``value``'s JSON as the app writes it; ValueError for a value JSON
    cannot carry (a lone surrogate), RecursionError past the encoder's depth."""
    return len(json.dumps(value, ensure_ascii=False).encode())

_MARK = " [cut]"


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def text_units(text: str) -> int:
    """The UTF-16 units ``text`` takes inside a JSON document (without its quotes): a character
    outside the Basic Multilingual Plane takes two, a quote two, a control character six."""
    return utf16_units(json.dumps(text, ensure_ascii=False)) - 2


def clip(text: str, units: int) -> str:
    """``text`` itself when its JSON form fits in ``units`` UTF-16 code units; else its start,
    marked as cut, that fits (never half of a surrogate pair, never half of an escape)."""
    if text_units(text) <= units:
        return text
    room = units - len(_MARK)
    out: list[str] = []
    for ch in text:
        room -= _char_units(ch)
        if room < 0:
            break
        out.append(ch)
    return "".join(out) + _MARK


def _char_units(ch: str) -> int:
    if ch < " " or ch in '"\\':
        return text_units(ch)
    return 2 if ord(ch) > 0xFFFF else 1


def clip_error(text: str | None) -> str | None:
    return None if text is None else clip(text, ERROR_TEXT)


def json_units(value: Any) -> int:
    """The UTF-16 units of ``value`` stored as JSON the way the state store writes it."""
    return utf16_units(json.dumps(value, ensure_ascii=False))


T = TypeVar("T")


def newest_within(entries: list[T], units: int) -> list[T]:
    """The newest entries whose JSON fits in ``units`` (the oldest are dropped first)."""
    kept = list(entries)
    while kept and json_units(kept) > units:
        kept.pop(0)
    return kept
