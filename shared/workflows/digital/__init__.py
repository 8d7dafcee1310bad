"""The second example: digital delivery. Charge the card, then send the download link. The
link cannot be unsent, so its step has no undo: when it fails for good, the charge is refunded
and nothing else is. It shares the payment service with order fulfilment and adds its own
(``email``), to show a second workflow in one app: same orders queue, the order names it."""

from __future__ import annotations

from datetime import timedelta

from shared.domain.workflow import Step, Workflow
from shared.workflows.orders.message import Order
from shared.workflows.orders.payment import PAYMENT, charge_input

DIGITAL_DELIVERY = Workflow(
    name="digital-delivery",
    message=Order,  # the same message as order fulfilment: one orders queue, one shape
    services=(PAYMENT,),  # the same payment code
    steps=(
        Step("charge_payment", service="payment", operation="charge",
             compensation="refund", budget=timedelta(seconds=30), input=charge_input),
        Step("send_download_link", service="email", operation="send",
             compensation=None, budget=timedelta(seconds=30)),
    ),
)
