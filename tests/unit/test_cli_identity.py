"""Who the `orders` CLI records as acting when it writes to storage itself: the signed-in
Entra ID identity when it reaches storage with one, and with a key no more than a login name,
said to be no identity (review: $USER was recorded as if it were one)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from orderctl.errors import CliError
from orderctl.identity import identity_of


def token(claims: dict[str, Any]) -> str:
    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.signature"


def test_the_signed_in_identity_is_named_by_its_token() -> None:
    who = identity_of(token({"name": "Ada Operator", "upn": "ada@contoso.example",
                             "oid": "7c1f0b9e-0000-4000-8000-000000000001"}))
    assert who == ("Ada Operator (ada@contoso.example; oid 7c1f0b9e-0000-4000-8000-000000000001;"
                   " orders CLI, storage)")
    # A service principal's token has no user names: its object id is what names it.
    assert "oid 42" in identity_of(token({"oid": "42"}))


def test_a_token_that_names_nobody_is_refused_not_recorded() -> None:
    with pytest.raises(CliError, match="names nobody"):
        identity_of("not-a-token")
