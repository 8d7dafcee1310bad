"""A simulated provider's API, shaped as card processors' are, for local runs, demos and tests
of code services (docs/adapting.md, A service as your own code). Each code service has its own,
under ``sim/provider/<service>``: ``POST /charges`` and ``POST /refunds``.
"""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import TableClient, UpdateMode

from shared.clock import Clock
from shared.handlers.simulated_service import (
    APPLIED,
    UNDONE,
    Faults,
    Response,
    named_to_hang,
    permanent_for,
)


def charge_id(key: str) -> str:
    """The charge's id: opaque to its caller; the simulator finds the charge's row by it."""
    return "ch_" + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def _key_of(charge: str) -> str | None:
    if not charge.startswith("ch_"):
        return None
    try:
        raw = charge[3:]
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def _order_of(body: dict[str, Any]) -> str:
    """The order a charge is for, from its metadata (what a provider keeps of the caller's)."""
    metadata = body.get("metadata")
    return str(metadata.get("order_id", "")) if isinstance(metadata, dict) else ""


class SimulatedProvider:
    """Keeps its charges in the simulated services' effects table, one row per charge under the
    calling service's partition and the charge's idempotency key, so that the local checks (the
    chaos run, the rolling rehearsal) read its work as the simulated HTTP services' (Status
    ``applied``, then ``undone``). Its faults are theirs (``Faults``)."""

    def __init__(self, table: TableClient, services: Iterable[str], faults: Faults, clock: Clock,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> None:
        self._table = table
        self._services = frozenset(services)
        self._faults = faults
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()

    def handle(self, service: str, call: str, key: str | None,
               body: dict[str, Any]) -> Response:
        """``service``: the code service calling, whose work this is (its partition)."""
        if service not in self._services or call not in ("charges", "refunds"):
            return Response(404, {"error": {"type": "invalid_request_error",
                                            "message": f"no such resource: {service}/{call}"}})
        if not key:
            return Response(400, {"error": {"type": "invalid_request_error",
                                            "message": "an Idempotency-Key header is required"}})
        f = self._faults
        if f.latency_ms:
            self._sleep(f.latency_ms / 1000)
        if self._rng.random() < f.transient_rate:
            return Response(503, {"error": {"type": "api_error", "message": "try again"}})
        if call == "charges":
            return self._charge(service, key, body)
        return self._refund(service, key, body)

    def _charge(self, service: str, key: str, body: dict[str, Any]) -> Response:
        """``POST /charges`` (``Idempotency-Key`` header; body amount, currency, customer): 200
        with the charge (its ``id``). A repeated key is answered with its first answer, whatever
        the body; a declined card (402) is declined again."""
        order = _order_of(body)
        # A test card's fault, not a draw: never declined in its place.
        named = named_to_hang(service, order)
        if not named and permanent_for(key, self._faults.permanent_rate):
            # The same key is declined every time: its first answer.
            return Response(402, {"error": {"type": "card_error", "code": "card_declined",
                                            "message": "your card was declined"}})
        if not named and self._rng.random() < self._faults.hang_rate:
            self._sleep(self._faults.hang_seconds)  # the caller gave up; the charge lands
        answer = {"id": charge_id(key), "object": "charge", "amount": str(body.get("amount")),
                  "currency": str(body.get("currency", "")), "status": "succeeded"}
        try:
            self._table.create_entity({
                "PartitionKey": service, "RowKey": key, "Operation": "charge",
                "OrderID": order, "Status": APPLIED,
                "AppliedAt": self._clock(), "Answer": json.dumps(answer)})
            if named:
                self._sleep(self._faults.hang_seconds)  # the answer is lost; the caller gives up
            return Response(200, answer)
        except ResourceExistsError:
            row = self._table.get_entity(service, key)
        first = row.get("Answer")
        return Response(200, json.loads(first) if first else {**answer, "status": "succeeded"})

    def _refund(self, service: str, key: str, body: dict[str, Any]) -> Response:
        """``POST /refunds`` (``Idempotency-Key``; body ``charge``: the charge's id): 200 with the
        refund. An unknown charge is 404; a charge refunded under another key, 400. No
        tombstones: a refund names work that exists, and nothing stops a later charge."""
        charge = str(body.get("charge", ""))
        target = _key_of(charge)
        try:
            row = self._table.get_entity(service, target) if target else None
        except ResourceNotFoundError:
            row = None
        if row is None:
            return Response(404, {"error": {"type": "invalid_request_error",
                                            "message": f"no such charge: {charge!r}"}})
        refund = {"id": "re_" + charge[3:], "object": "refund", "charge": charge,
                  "status": "succeeded"}
        if row.get("Status") == UNDONE:
            if key in (row.get("RefundKey"), row.get("UndoKey")):
                return Response(200, refund)  # the same refund asked again: its first answer
            return Response(400, {"error": {"type": "invalid_request_error",
                                            "code": "charge_already_refunded",
                                            "message": f"charge {charge} is already refunded"}})
        row["Status"] = UNDONE
        row["UndoneAt"] = self._clock()
        row["UndoOperation"] = "refund"
        row["RefundKey"] = row["UndoKey"] = key
        try:
            self._table.update_entity(row, mode=UpdateMode.REPLACE, etag=row.metadata["etag"],
                                      match_condition=MatchConditions.IfNotModified)
        except ResourceModifiedError:  # a concurrent refund: asked again, it gets its answer
            return Response(409, {"error": {"type": "idempotency_error",
                                            "message": "a request on this charge is under way"}})
        return Response(200, refund)
