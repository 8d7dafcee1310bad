"""The shipped example: order fulfilment. Reserve the stock, charge the card, book the parcel;
undo them in reverse when the order fails. Its message model: ``message.py`` beside this file."""

from __future__ import annotations

from datetime import timedelta

from shared.domain.workflow import Step, Workflow
from shared.workflows.orders.message import Order

ORDER_FULFILMENT = Workflow(
    name="order-fulfilment",
    message=Order,
    steps=(
        Step("reserve_inventory", agent="inventory", operation="reserve",
             compensation="release", budget=timedelta(seconds=30)),
        Step("charge_payment", agent="payment", operation="charge",
             compensation="refund", budget=timedelta(seconds=30)),
        # A shipment booked by an attempt we gave up on must be cancellable too, or an order
        # that fails on a hung shipping call would leave a parcel behind.
        Step("arrange_shipping", agent="shipping", operation="ship",
             compensation="cancel", budget=timedelta(seconds=60)),
    ),
)
