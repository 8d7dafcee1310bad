"""Continuation tokens of table queries, as an opaque string an operator's client hands back."""

from __future__ import annotations

import base64
import json
from typing import Any


class BadContinuation(ValueError):
    """A continuation token that this store did not hand out."""


def encode_token(token: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(token).encode()).decode()


def decode_token(token: str | None) -> Any:
    if not token:
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, UnicodeDecodeError):
        raise BadContinuation("continuation token is not one this API handed out") from None
    if not isinstance(value, dict):
        raise BadContinuation("continuation token is not one this API handed out")
    return value
