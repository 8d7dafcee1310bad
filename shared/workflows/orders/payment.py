"""The example's payment service, as code: charges a card at a payment provider and refunds the
charge by its id, as card processors' APIs take them. Locally and in a demo deployment the
provider is the simulated one (shared/handlers/simulated_provider.py); in production,
PaymentProviderUrl names yours (its key, if it takes one, as a Key Vault reference).

What a code service is handed and may raise: shared/domain/services.py; a walk-through of
writing one: docs/adapting.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import httpx

from shared.domain.services import Call, CodeService, Refuse, Retry

# One client for the process: its connections are kept between calls.
_http = httpx.Client(follow_redirects=False)


class CardDeclined(Exception):
    """The provider declined the card: declared permanent below, so the step fails for good."""


def charge_input(order: Mapping[str, Any],
                 results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What the charge needs of the order: the amount and who pays, not the address."""
    total = sum((Decimal(i["unit_price"]) * int(i["quantity"]) for i in order["items"]),
                Decimal("0"))
    return {"amount": str(total), "currency": "EUR", "customer": order["customer_id"]}


class AlreadyRefunded(Exception):
    """The provider says the charge was refunded before (under another key): it is undone."""


def _post(call: Call, path: str, body: dict[str, Any]) -> dict[str, Any]:
    url = call.settings["PaymentProviderUrl"].rstrip("/")
    try:
        r = _http.post(f"{url}/{path}", json=body, headers={
            "Idempotency-Key": call.key,
            "Authorization": f"Bearer {call.settings['PaymentProviderKey']}",
            # The order's trace: a provider that reads W3C trace context joins it.
            **({"traceparent": call.traceparent} if call.traceparent else {})},
            timeout=max(0.1, min(call.time_left(), 10.0)))
    except httpx.TransportError as e:  # the charge may have landed: asked again, same key
        raise Retry(f"the payment provider did not answer: {type(e).__name__}") from e
    error = r.json().get("error", {}) if r.headers.get("content-type", "").startswith(
        "application/json") and r.status_code >= 400 else {}
    message = str(error.get("message") or r.text[:200])
    if r.status_code == 402:
        raise CardDeclined(message)
    if error.get("code") == "charge_already_refunded":
        raise AlreadyRefunded(message)
    if r.status_code in (408, 409, 425, 429) or r.status_code >= 500:
        after = r.headers.get("Retry-After", "")
        raise Retry(f"HTTP {r.status_code} {message}",
                    float(after) if after.isascii() and after.isdigit() else None,
                    busy=r.status_code == 429)
    if r.status_code >= 300:
        raise Refuse(f"HTTP {r.status_code} {message}")
    answer = r.json()
    if not isinstance(answer, dict):
        raise Retry("the payment provider's answer is not a JSON object")
    return answer


def charge(call: Call) -> dict[str, Any]:
    answer = _post(call, "charges", {**call.input,
                                     "metadata": {"order_id": call.order_id}})
    # The result the order keeps: what its refund (and any later step) needs.
    return {"charge_id": answer["id"], "amount": answer.get("amount")}


def refund(call: Call) -> dict[str, Any]:
    if call.result is None or "charge_id" not in call.result:
        raise Refuse("no charge to refund: the charge's result was never kept")
    try:
        answer = _post(call, "refunds", {"charge": call.result["charge_id"]})
    except AlreadyRefunded:
        # Undone already (a refund under another key, or by hand): what the undo is for.
        return {"refund_id": None, "already_refunded": True}
    return {"refund_id": answer["id"]}


PAYMENT = CodeService(
    name="payment",
    operations={"charge": charge, "refund": refund},
    # Its API key: in Azure a Key Vault reference, never a value in code or in the Bicep.
    settings=("PaymentProviderUrl", "PaymentProviderKey"),
    permanent=(CardDeclined,),
    # The simulated provider, in a local run or a demo deployment: where the simulators are,
    # and the key the app's calls to them carry.
    local={"PaymentProviderUrl": "{simulators}/provider/payment",
           "PaymentProviderKey": "{RemoteServiceKey}"},
)
