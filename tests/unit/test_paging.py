"""Continuation tokens an operator's client hands back: anything but one this API handed out is
a 400 (BadContinuation, a ValueError), never a 500."""

from __future__ import annotations

import base64

import pytest

from shared.adapters.paging import BadContinuation, decode_token, encode_token


def test_a_token_handed_out_comes_back_as_it_was() -> None:
    token = {"PartitionKey": "o-1", "RowKey": "state"}
    assert decode_token(encode_token(token)) == token


@pytest.mark.parametrize("token", [
    "not base64 at all!",
    base64.urlsafe_b64encode(b"[1]").decode(),
    base64.urlsafe_b64encode(b'{"PartitionKey": "a", "Other": "b"}').decode(),
    base64.urlsafe_b64encode(b'{"PartitionKey": "a\\nb"}').decode(),
    # nested past the JSON parser's depth: a RecursionError answered 500 (red team R7)
    base64.urlsafe_b64encode(b"[" * 1200 + b"]" * 1200).decode()])
def test_a_token_it_never_handed_out_is_refused(token: str) -> None:
    with pytest.raises(BadContinuation):
        decode_token(token)
