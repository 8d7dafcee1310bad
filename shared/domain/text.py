"""Text from outside, made inert: shown to an operator, never acted on by their terminal."""

from __future__ import annotations

import re

# What a terminal acts on rather than shows: C0 controls (line breaks and tabs too: a value must
# not fake a line), DEL, C1 (CSI, OSC: clear the screen, a link, a clipboard write), and the
# format characters that reorder or hide text (bidi embeddings, overrides and isolates,
# zero-width, line and paragraph separators, the byte-order mark).
ACTING = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """``text`` with each character a terminal would act on written as its escape (``\\x1b``,
    ``\\u202e``)."""
    return ACTING.sub(_escape, text)
