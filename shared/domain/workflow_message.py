"""What every workflow's message has, whatever else its workflow asks for: an id, the workflow
it follows, where to send status updates. A workflow declares its own message model on this
base (the example's: ``shared/workflows/orders/message.py``); intake reads which workflow a
message names, then validates the whole message with that workflow's model.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

# Table Storage keys may not hold / \ # ? or control characters; we are stricter so that an id
# is also safe in a queue message, a URL path and a log query.
ORDER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
# Text a person reads: no control characters (JSON would store each as a six-unit escape, and
# the largest message would no longer fit the stored document: docs/limits.md).
TEXT_PATTERN = r"^[^\u0000-\u001f\u007f]+$"
# Storage queue names: 3-63 lower-case letters, digits and single hyphens.
QUEUE_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$"
# A workflow's name, as a message and a record carry it.
WORKFLOW_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"

M = TypeVar("M", bound=BaseModel)


class InvalidOrder(ValueError):
    """The message is not one we can accept. Retrying it will not help."""


def json_integer(v: Any) -> Any:
    """What JSON Schema calls an integer (2, or 2.0), and not what Python would also take for
    one: true, or the string "2"."""
    if isinstance(v, bool | str):
        raise ValueError("Input should be a JSON integer")
    return v


class WorkflowMessage(BaseModel):
    """The fields the engine reads. A workflow's model adds its own; fields not declared are
    refused (``extra="forbid"``), so a typo is a rejection with a reason, not lost data."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Which of columns() names the customer, for the operator's search by customer (None: the
    # workflow's orders have none).
    customer_column: ClassVar[str | None] = None

    schema_version: Annotated[int, Field(json_schema_extra={"enum": [1]}),
                              BeforeValidator(json_integer)] = 1
    order_id: Annotated[str, Field(pattern=ORDER_ID_PATTERN)]
    # Which of the app's workflows the message follows; the app's default when absent.
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

    def document(self) -> dict[str, Any]:
        doc = self.model_dump(mode="json")
        if doc["workflow"] is None:
            # As before messages could name one: the same message keeps the same fingerprint.
            del doc["workflow"]
        return doc

    def columns(self) -> dict[str, str]:
        """Properties of the stored order row beside its document, for queries in the
        storage browser: none unless the workflow's model names some."""
        return {}

    @classmethod
    def sample(cls, rng: random.Random) -> dict[str, Any] | None:
        """A plausible message's own fields (not its id, workflow or reply queue), for the
        CLI's and the demo's sample orders; None: the workflow gives none (its orders are sent
        from a file)."""
        return None

    def fingerprint(self) -> str:
        """A content hash: tells a redelivery from a different message with the same id."""
        canonical = json.dumps(self.document(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


class Envelope(BaseModel):
    """Just enough of any message to choose its workflow's model."""

    model_config = ConfigDict(extra="ignore")

    workflow: Annotated[str, Field(pattern=WORKFLOW_NAME_PATTERN)] | None = None


def refuse_duplicate_keys(body: bytes | str) -> None:
    """InvalidOrder naming a key an object of the body holds twice: JSON parsers disagree on
    which one counts (this app's takes the last), so such an order means two things."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                raise InvalidOrder(f"body: the key {key[:40]!r} is given twice in one object")
            seen.add(key)
        return dict(items)

    try:
        json.loads(body, object_pairs_hook=pairs)
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        if isinstance(e, InvalidOrder):
            raise
        # Not JSON (or too deep to read here): the model's reading says why.


def validate_as(model: type[M], body: bytes | str) -> M:
    """Parse and validate a body; raise InvalidOrder with a reason a person can act on."""
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        reasons = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in e.errors()
        )
        raise InvalidOrder(reasons) from None
