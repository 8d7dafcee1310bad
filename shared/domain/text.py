"""Text from outside, made inert: shown to an operator, never acted on by their terminal."""

from __future__ import annotations

import unicodedata

# What a terminal or a page acts on rather than shows: controls (C0 and C1: line breaks and
# tabs too, since a value must not fake a line; CSI and OSC clear the screen, make a link,
# write the clipboard), format characters (bidi embeddings, overrides, isolates and marks,
# zero-width ones, soft hyphens, tags, interlinear annotations: they reorder or hide text, or
# make two ids look alike), line and paragraph separators, and lone surrogates.
ACTING_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def acts(ch: str) -> bool:
    return unicodedata.category(ch) in ACTING_CATEGORIES


def _escape(ch: str) -> str:
    code = ord(ch)
    return (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
            else f"\\U{code:08x}")


def inert(text: str) -> str:
    """``text`` with each character a terminal would act on written as its escape (``\\x1b``,
    ``\\u202e``, ``\\U000e0041``)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escape(ch) if acts(ch) else ch for ch in text)
