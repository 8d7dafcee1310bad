"""The shipped example: order fulfilment. Reserve the stock, charge the card, book the parcel;
undo them in reverse when the order fails. Its message model: ``message.py`` beside this file."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from shared.domain.workflow import Step, Workflow
from shared.workflows.orders.message import Order
from shared.workflows.orders.payment import PAYMENT, charge_input


def shipping_input(order: Mapping[str, Any],
                   results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {"customer_id": order["customer_id"],
            "items": [{"sku": i["sku"], "quantity": i["quantity"]} for i in order["items"]],
            "reservation": results.get("reserve_inventory")}


ORDER_FULFILMENT = Workflow(
    name="order-fulfilment",
    message=Order,
    # Payment is the user's own code calling a payment provider (payment.py); the others speak
    # the HTTP contract (docs/contracts.md).
    services=(PAYMENT,),
    steps=(
        Step("reserve_inventory", service="inventory", operation="reserve",
             compensation="release", budget=timedelta(seconds=30)),
        Step("charge_payment", service="payment", operation="charge",
             compensation="refund", budget=timedelta(seconds=30), input=charge_input),
        # A shipment booked by an attempt we gave up on must be cancellable too, or an order
        # that fails on a hung shipping call would leave a parcel behind.
        # Shipping gets what it ships and the reservation it ships from, not prices or payment.
        Step("arrange_shipping", service="shipping", operation="ship",
             compensation="cancel", budget=timedelta(seconds=60), input=shipping_input),
    ),
)
