"""Simulated remote services for local runs, demos and tests: one for each service the
registered workflows call, taking the operations its workflows' steps name. Each answers as a
well-made remote API does, with the faults the settings ask for (``Sim*``: docs/settings.md).
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import TableClient, UpdateMode

from shared.clock import Clock
from shared.domain import senders

# An effect's Status in the effects table (one row per ``<service> / <do-key>``): applied, then
# undone; or voided when the undo arrived before the work, so that late work is refused.
APPLIED, UNDONE, VOIDED = "applied", "undone", "voided"
# One fault an order can ask for, so that a test or a demo gets it for certain, as a card
# processor's test cards do: a call to service <service> for an order whose id starts with
# ``sim-hang-<service>-`` does its work at once and then hangs for SimHangSeconds, as if its
# answer were lost on the way. Only the call that did the work hangs: any other call under the
# same key finds it done and answers at once, however late the hung one began, so each such
# step is in doubt exactly once. (SimHangRate draws at random, per call, and a hung call of
# that kind does its work late.)
HANG_PREFIX = "sim-hang-"


def named_to_hang(service: str, order_id: str) -> bool:
    return senders.own_id(order_id).startswith(f"{HANG_PREFIX}{service}-")


@dataclass(frozen=True)
class Faults:
    latency_ms: int = 0
    transient_rate: float = 0.0
    permanent_rate: float = 0.0
    hang_rate: float = 0.0
    hang_seconds: float = 120.0


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any]


def permanent_for(key: str, rate: float) -> bool:
    # Deterministic per key: a declined card stays declined however often it is retried.
    digest = hashlib.sha256(f"permanent:{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < rate


class SimulatedService:
    """De-duplicates by idempotency key, records every effect it makes (so tests can count
    charges and refunds) and refuses work for a key already undone. A hang drawn at random
    still does the work, late, as a real service behind a slow network does."""

    def __init__(self, table: TableClient, operations: dict[str, dict[str, str]],
                 faults: Faults, clock: Clock,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> None:
        self._table = table
        self._operations = operations  # service -> operation -> "do" | "undo"
        self._faults = faults
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()

    def handle(self, service: str, operation: str, key: str | None,
               body: dict[str, Any]) -> Response:
        kind = self._operations.get(service, {}).get(operation)
        if kind is None:
            return Response(404, {"error": f"no operation {service}/{operation}"})
        if not key:
            return Response(400, {"error": "the Idempotency-Key header is required"})
        f = self._faults
        if f.latency_ms:
            self._sleep(f.latency_ms / 1000)
        if self._rng.random() < f.transient_rate:
            return Response(503, {"error": "simulated transient fault"})
        if kind == "do":
            # A test card's fault, not a draw: never refused in its place.
            if named_to_hang(service, str(body.get("order_id", ""))):
                done = self._do(service, operation, key, body)
                if done.status == 200 and not done.body.get("duplicate"):
                    self._sleep(f.hang_seconds)  # the answer is lost; the caller gives up
                return done
            if permanent_for(key, f.permanent_rate):
                return Response(422, {"error": f"simulated permanent fault: {operation} refused"})
            if self._rng.random() < f.hang_rate:
                self._sleep(f.hang_seconds)  # the caller has long given up; the work happens
            return self._do(service, operation, key, body)
        target = body.get("compensates")
        if not isinstance(target, str) or not target:
            return Response(400, {"error": "an undo needs 'compensates': the key of the work"})
        return self._undo(service, operation, target, body, key)

    def _do(self, service: str, operation: str, key: str, body: dict[str, Any]) -> Response:
        try:
            self._table.create_entity({
                "PartitionKey": service, "RowKey": key, "Operation": operation,
                "OrderID": str(body.get("order_id", "")), "Status": APPLIED,
                "AppliedAt": self._clock(),
            })
            return Response(200, {"status": APPLIED, "key": key})
        except ResourceExistsError:
            existing = self._table.get_entity(service, key)
        if existing["Status"] == APPLIED:
            return Response(200, {"status": APPLIED, "key": key, "duplicate": True})
        return Response(409, {"error": f"{operation} {key} was {existing['Status']}"})

    def _undo(self, service: str, operation: str, target: str, body: dict[str, Any],
              key: str) -> Response:
        for _ in range(5):
            try:
                e = self._table.get_entity(service, target)
            except ResourceNotFoundError:
                try:
                    self._table.create_entity({
                        "PartitionKey": service, "RowKey": target, "Status": VOIDED,
                        "OrderID": str(body.get("order_id", "")), "UndoneAt": self._clock(),
                        "UndoOperation": operation,
                    })
                    return Response(200, {"status": VOIDED, "key": target})
                except ResourceExistsError:
                    continue  # the work landed meanwhile: undo it
            if e["Status"] != APPLIED:
                return Response(200, {"status": e["Status"], "key": target, "duplicate": True})
            e["Status"] = UNDONE
            e["UndoneAt"] = self._clock()
            e["UndoOperation"] = operation
            # The undo's own key: a provider sharing this ledger answers it again the same.
            e["UndoKey"] = key
            try:
                self._table.update_entity(e, mode=UpdateMode.REPLACE, etag=e.metadata["etag"],
                                          match_condition=MatchConditions.IfNotModified)
                return Response(200, {"status": UNDONE, "key": target})
            except ResourceModifiedError:
                continue
        return Response(503, {"error": "contended, try again"})
