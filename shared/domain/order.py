"""An order as submitted, and the rules it must meet before we accept it."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# Table Storage keys may not hold / \ # ? or control characters; we are stricter so that an id
# is also safe in a queue message, a URL path and a log query.
ORDER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
# Storage queue names: 3-63 lower-case letters, digits and single hyphens.
QUEUE_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$"


class InvalidOrder(ValueError):
    """The message is not an order we can accept. Retrying it will not help."""


class LineItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sku: Annotated[str, Field(min_length=1, max_length=64)]
    quantity: Annotated[int, Field(gt=0, le=10_000)]
    unit_price: Annotated[Decimal, Field(ge=0, max_digits=12, decimal_places=2)]


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = 1
    order_id: Annotated[str, Field(pattern=ORDER_ID_PATTERN)]
    customer_id: Annotated[str, Field(min_length=1, max_length=128)]
    items: Annotated[list[LineItem], Field(min_length=1, max_length=100)]
    reply_to: Annotated[str | None, Field(pattern=QUEUE_NAME_PATTERN)] = None

    @field_validator("reply_to")
    @classmethod
    def _no_double_hyphen(cls, v: str | None) -> str | None:
        if v is not None and "--" in v:
            raise ValueError("a queue name may not contain two hyphens in a row")
        return v

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v != 1:
            raise ValueError(f"unsupported schema_version {v}")
        return v

    @property
    def total(self) -> Decimal:
        return sum((i.unit_price * i.quantity for i in self.items), Decimal("0"))

    def document(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def fingerprint(self) -> str:
        """A content hash: tells a redelivery from a different order with the same id."""
        canonical = json.dumps(self.document(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def parse_order(body: bytes | str) -> Order:
    """Parse and validate a message body; raise InvalidOrder with a reason a person can act on."""
    try:
        return Order.model_validate_json(body)
    except ValidationError as e:
        reasons = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in e.errors()
        )
        raise InvalidOrder(reasons) from None
