"""Messages checked against the published AsyncAPI document (schemas/asyncapi.yaml), as a team
that integrates with the app would check them: by the file, not by the code."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from tests.conftest import ROOT

ASYNCAPI = ROOT / "schemas" / "asyncapi.yaml"


@cache
def _document() -> dict[str, Any]:
    return yaml.safe_load(ASYNCAPI.read_text())


def channel_of_queue(settings: Mapping[str, str]) -> dict[str, str]:
    """Queue name -> channel id, for the channels whose address is a %Setting% expression."""
    out = {}
    for cid, ch in _document()["channels"].items():
        address = ch["address"]
        if address.startswith("%") and address.endswith("%"):
            out[settings[address.strip("%")]] = cid
    return out


@cache
def payload_validator(channel: str) -> Draft202012Validator:
    doc = _document()
    (ref,) = [m["$ref"] for m in doc["channels"][channel]["messages"].values()]
    message = doc["components"]["messages"][ref.rsplit("/", 1)[1]]
    return Draft202012Validator({**message["payload"], "components": doc["components"]})


def problems(channel: str, body: str) -> list[str]:
    """Why the body is not a message of the channel (empty when it is)."""
    try:
        value = json.loads(body)
    except ValueError as e:
        return [f"not JSON: {e}"]
    return [f"{'/'.join(map(str, e.absolute_path)) or 'body'}: {e.message}"
            for e in payload_validator(channel).iter_errors(value)]


def recorded(files: list[Path]) -> list[dict[str, Any]]:
    """What local hosts recorded with --record-messages (a killed one may have cut its last
    line short: that line is left out)."""
    out = []
    for f in files:
        lines = f.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            try:
                out.append(json.loads(line))
            except ValueError:
                assert i == len(lines) - 1, f"{f}: line {i + 1} is not JSON"
    return out
