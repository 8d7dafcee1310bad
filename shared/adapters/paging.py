"""Continuation tokens of table queries, as an opaque string an operator's client hands back."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

_KEYS = {"PartitionKey", "RowKey"}
_VALUE = re.compile(r"^[A-Za-z0-9!*()_.~=+/:-]{1,1024}$")


class BadContinuation(ValueError):
    """A continuation token that this store did not hand out."""


def encode_token(token: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(token).encode()).decode()


def decode_token(token: str | None) -> Any:
    if not token:
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode(token.encode()))
    # RecursionError: a token of a thousand nested brackets (never one this API handed out).
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadContinuation("continuation token is not one this API handed out") from None
    # It goes back to storage as request headers: only the two keys the service hands out,
    # as the strings it hands out (opaque, base64-like), or the request would fail in storage.
    if not (isinstance(value, dict) and value and set(value) <= _KEYS
            and all(v is None or (isinstance(v, str) and _VALUE.match(v))
                    for v in value.values())):
        raise BadContinuation("continuation token is not one this API handed out")
    return value
