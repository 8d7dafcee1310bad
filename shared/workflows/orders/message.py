"""The example's order message: who orders what, at what price. Its envelope (id, workflow,
reply queue) is every workflow's (``shared/domain/workflow_message.py``)."""

from __future__ import annotations

import random
import re
from decimal import Decimal
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from shared.domain.workflow_message import (
    TEXT_PATTERN,
    InvalidOrder,
    WorkflowMessage,
    json_integer,
    validate_as,
)

__all__ = ["InvalidOrder", "LineItem", "Order", "parse_order"]

# What the sample orders (the CLI's, the demo's) buy.
CATALOGUE = [("SKU-TEA", "4.50"), ("SKU-MUG", "12.00"), ("SKU-KETTLE", "39.90"),
             ("SKU-BEANS", "9.75"), ("SKU-FILTER", "2.20"), ("SKU-GRINDER", "64.00")]
PRICE_PATTERN = r"^(0|[1-9][0-9]{0,9})(\.[0-9]{1,2})?$"


def _price_schema(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update({"title": "Unit Price", "type": "string", "pattern": PRICE_PATTERN,
                   "description": "A decimal string with at most 2 decimals; not a number.",
                   "examples": ["12.50"]})


class LineItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sku: Annotated[str, Field(min_length=1, max_length=64, pattern=TEXT_PATTERN)]
    quantity: Annotated[int, Field(gt=0, le=10_000), BeforeValidator(json_integer)]
    # Money is a decimal string ("12.50"), never a JSON number: a number is a binary float in
    # most senders' languages, and JSON Schema validators disagree on whether 2.01 is a multiple
    # of 0.01, so a sender's validator and ours could not agree on one.
    unit_price: Annotated[Decimal, Field(ge=0, max_digits=12, decimal_places=2,
                                         json_schema_extra=_price_schema)]

    @field_validator("unit_price", mode="before")
    @classmethod
    def _decimal_string(cls, v: Any) -> Any:
        if not isinstance(v, str) or not re.fullmatch(PRICE_PATTERN, v):
            raise ValueError('a price is a string of digits with at most 2 decimals, e.g. '
                             '"12.50"')
        return v


class Order(WorkflowMessage):
    customer_column: ClassVar[str | None] = "CustomerId"

    customer_id: Annotated[str, Field(min_length=1, max_length=128, pattern=TEXT_PATTERN)]
    items: Annotated[list[LineItem], Field(min_length=1, max_length=100)]

    @property
    def total(self) -> Decimal:
        return sum((i.unit_price * i.quantity for i in self.items), Decimal("0"))

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any]:
        items = [{"sku": sku, "quantity": rng.randint(1, 3), "unit_price": price}
                 for sku, price in rng.sample(CATALOGUE, rng.randint(1, 3))]
        return {"customer_id": f"cust-{rng.randint(1, 500):04d}", "items": items}

    def columns(self) -> dict[str, str]:
        return {"CustomerId": self.customer_id, "Total": str(self.total)}


def parse_order(body: bytes | str) -> Order:
    """Parse and validate an order; raise InvalidOrder with a reason a person can act on."""
    return validate_as(Order, body)
