"""The simulated payment provider as providers' APIs behave, on Azurite through the local host:
a charge answers with its id, a repeated key with its first answer, a refund names the charge,
nothing keeps tombstones; and the example's payment code undoes by that id, taking a charge
refunded before (under another key) as undone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from shared.domain.messages import Action
from shared.domain.services import Call
from shared.workflows.orders.payment import PAYMENT
from tests.conftest import wait_until
from tests.integration.conftest import RunningHost


def post(h: RunningHost, call: str, key: str, body: dict[str, Any],
         bearer: str = "test-function-key", service: str = "payment",
         timeout: float = 10) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{h.port}/api/sim/provider/{service}/{call}", json=body,
                      headers={"Idempotency-Key": key, "Authorization": f"Bearer {bearer}"},
                      timeout=timeout)


def test_charges_are_answered_by_key_and_refunded_by_id(run_host: Any) -> None:
    h: RunningHost = run_host(only={"simulated_provider"})
    assert post(h, "charges", "k-1", {"amount": "9.00"}, bearer="wrong").status_code == 401
    first = post(h, "charges", "k-1", {"amount": "9.00", "metadata": {"order_id": "o-1"}})
    assert first.status_code == 200 and first.json()["id"].startswith("ch_")
    again = post(h, "charges", "k-1", {"amount": "1.00"})  # another body, the same key
    assert again.json() == first.json()
    charge = first.json()["id"]
    assert post(h, "refunds", "r-1", {"charge": "ch_nope"}).status_code == 404
    refund = post(h, "refunds", "r-1", {"charge": charge})
    assert refund.status_code == 200 and refund.json()["charge"] == charge
    assert post(h, "refunds", "r-1", {"charge": charge}).json() == refund.json()
    twice = post(h, "refunds", "r-2", {"charge": charge})
    assert twice.status_code == 400 and twice.json()["error"]["code"] == "charge_already_refunded"
    # No tombstones: the key's first answer stands, and a new key is a new charge.
    assert post(h, "charges", "k-1", {}).json() == first.json()
    assert post(h, "charges", "k-2", {}).json()["id"] != charge
    rows = {(e["PartitionKey"], e["RowKey"]): e for e in h.container.tables.get_table_client(
        h.env["SimulatorTableName"]).list_entities()}
    assert (rows["payment", "k-1"]["Status"], rows["payment", "k-1"]["OrderID"]) == \
        ("undone", "o-1")
    # Each code service has its own provider; a name that is no code service has none.
    for service in ("inventory", "no-such", "payment%2Fx"):
        assert post(h, "charges", "k-3", {}, service=service).status_code == 404, service


def test_a_charge_named_to_hang_lands_and_only_its_first_call_hangs(run_host: Any) -> None:
    """The simulator's test card: the charge is made and its answer lost; asked again under its
    key while that first call still hangs, the provider answers at once with the charge."""
    h: RunningHost = run_host(only={"simulated_provider"}, SimHangSeconds="4",
                              SimPermanentErrorRate="1")
    body = {"amount": "5.00", "metadata": {"order_id": "sim-hang-payment-7"}}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"http://127.0.0.1:{h.port}/api/sim/provider/payment/charges", json=body,
                   headers={"Idempotency-Key": "k-7", "Authorization": "Bearer test-function-key"},
                   timeout=0.5)
    charges = h.container.tables.get_table_client(h.env["SimulatorTableName"])
    # Made while the first call still hangs (for 4 s), whenever the host began it.
    wait_until(lambda: any(e["RowKey"] == "k-7" for e in charges.list_entities()), timeout=2,
               message="the hung call's charge")
    again = post(h, "charges", "k-7", body, timeout=2)  # less than the hang
    assert again.status_code == 200 and again.json()["id"].startswith("ch_")
    other = post(h, "charges", "k-8", {"amount": "1.00", "metadata": {"order_id": "o-8"}},
                 timeout=2)
    # The provider's other orders are answered at once: declined, every card is at this rate;
    # the named order's fault is its own, never a decline.
    assert other.status_code == 402


def test_the_payment_code_refunds_by_the_charges_id_once(run_host: Any) -> None:
    h: RunningHost = run_host(only={"simulated_provider"})
    settings = {"PaymentProviderUrl": f"http://127.0.0.1:{h.port}/api/sim/provider/payment",
                "PaymentProviderKey": "test-function-key"}

    def call(action: Action, key: str, result: dict[str, Any] | None = None) -> Call:
        return Call(order_id="o-9", step="charge_payment", action=action,
                    operation="charge" if action is Action.DO else "refund", key=key,
                    attempt=1, complete_by=datetime.now(UTC) + timedelta(seconds=30),
                    input={"amount": "12.00", "currency": "EUR", "customer": "c-1"},
                    results={}, result=result, settings=settings,
                    now=lambda: datetime.now(UTC))

    charged = PAYMENT.operations["charge"](call(Action.DO, "o-9.charge_payment.do"))
    assert charged["charge_id"].startswith("ch_") and charged["amount"] == "12.00"
    refund = PAYMENT.operations["refund"]
    done = refund(call(Action.UNDO, "o-9.charge_payment.undo", dict(charged)))
    assert done["refund_id"]
    # Refunded before under another key (by hand, or by an earlier release's undo): undone.
    assert refund(call(Action.UNDO, "by-hand", dict(charged))) == {
        "refund_id": None, "already_refunded": True}
