"""An order as submitted, and the rules it must meet before we accept it."""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from shared.domain.workflow import WORKFLOW_NAME_PATTERN

# Table Storage keys may not hold / \ # ? or control characters; we are stricter so that an id
# is also safe in a queue message, a URL path and a log query.
ORDER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
# Text a person reads: no control characters (JSON would store each as a six-unit escape, and
# the largest order would no longer fit the stored document: docs/limits.md).
TEXT_PATTERN = r"^[^\u0000-\u001f\u007f]+$"
# Storage queue names: 3-63 lower-case letters, digits and single hyphens.
QUEUE_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$"


PRICE_PATTERN = r"^(0|[1-9][0-9]{0,9})(\.[0-9]{1,2})?$"


def _price_schema(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update({"title": "Unit Price", "type": "string", "pattern": PRICE_PATTERN,
                   "description": "A decimal string with at most 2 decimals; not a number.",
                   "examples": ["12.50"]})


class InvalidOrder(ValueError):
    """The message is not an order we can accept. Retrying it will not help."""


def _json_integer(v: Any) -> Any:
    """What JSON Schema calls an integer (2, or 2.0), and not what Python would also take for
    one: true, or the string "2"."""
    if isinstance(v, bool | str):
        raise ValueError("Input should be a JSON integer")
    return v


class LineItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sku: Annotated[str, Field(min_length=1, max_length=64, pattern=TEXT_PATTERN)]
    quantity: Annotated[int, Field(gt=0, le=10_000), BeforeValidator(_json_integer)]
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


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Annotated[int, Field(json_schema_extra={"enum": [1]}),
                              BeforeValidator(_json_integer)] = 1
    order_id: Annotated[str, Field(pattern=ORDER_ID_PATTERN)]
    customer_id: Annotated[str, Field(min_length=1, max_length=128, pattern=TEXT_PATTERN)]
    items: Annotated[list[LineItem], Field(min_length=1, max_length=100)]
    # Which of the app's workflows the order follows; the app's default when absent.
    workflow: Annotated[str, Field(pattern=WORKFLOW_NAME_PATTERN)] | None = None
    # The schema says what the validator below checks, so that a sender's validator agrees.
    reply_to: Annotated[str, Field(pattern=QUEUE_NAME_PATTERN,
                                   json_schema_extra={"not": {"pattern": "--"}})] | None = None

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
        doc = self.model_dump(mode="json")
        if doc["workflow"] is None:
            # As before orders could name one: the same order keeps the same fingerprint.
            del doc["workflow"]
        return doc

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
