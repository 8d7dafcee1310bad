"""The function index of an app, read once.

``FunctionApp.get_functions()`` builds the index and refuses to run a second time in a process
(it sees its own functions as duplicates), so everyone here reads it through this cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import azure.functions as func


@dataclass(frozen=True)
class IndexedFunction:
    name: str
    bindings: tuple[dict[str, Any], ...]
    call: Any

    @property
    def trigger(self) -> dict[str, Any]:
        (t,) = [b for b in self.bindings if b["type"].endswith("Trigger")]
        return t

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return [b for b in self.bindings if b["direction"].upper() == "OUT"]


_cache: dict[int, list[IndexedFunction]] = {}


def functions_of(app: func.FunctionApp) -> list[IndexedFunction]:
    if id(app) not in _cache:
        _cache[id(app)] = [
            # The v2 model names every function (its Python name unless function_name says).
            IndexedFunction(f.get_function_name() or f.get_user_function().__name__,
                            tuple(json.loads(b) for b in f.get_raw_bindings()),
                            f.get_user_function())
            for f in app.get_functions()
        ]
    return _cache[id(app)]
