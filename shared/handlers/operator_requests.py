"""What an operator asks of the app, as the HTTP API and the CLI take it: the request bodies,
read strictly and refused in a sentence; the checks of ids and states; and the refusals the
operator's actions answer with (shared/handlers/operator.py carries them out)."""

from __future__ import annotations

import re
from typing import Annotated, Literal, TypeVar

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from shared.domain import budget
from shared.domain.senders import RECORD_ID_PATTERN
from shared.domain.state import ProcessState

MAX_PAGE = 1000


# A resubmit reason is kept in the order's history: a sentence, not a document.
MAX_REASON = budget.REASON_TEXT
_ORDER_ID = re.compile(RECORD_ID_PATTERN)
ID_PREFIX_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:~-]{0,148}$"
ID_PREFIX = re.compile(ID_PREFIX_PATTERN)


class ResubmitRequest(BaseModel):
    """The body of POST /api/orders/{id}/resubmit (optional as a whole)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str = Field("", max_length=MAX_REASON)
    force: bool = False

    @classmethod
    def from_body(cls, body: bytes) -> ResubmitRequest:
        """The request, or ValueError saying what is wrong with it, in a sentence."""
        if not body.strip():
            return cls()
        try:
            return cls.model_validate_json(body)
        except ValidationError as e:
            raise ValueError(_first_problem(e)) from None


def _first_problem(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"]) or "body"
    if err["type"] == "extra_forbidden":
        return f"{where} is not a field of a resubmit (reason, force)"
    if err["type"] in ("json_invalid", "model_type"):
        return 'body must be a JSON object, e.g. {"reason": "card limit raised"}'
    return f"{where}: {err['msg']}"


def check_order_id(order_id: str) -> None:
    if not _ORDER_ID.fullmatch(order_id):
        raise ValueError(f"{order_id[:160]!r} is not an order id (letters, digits and ._:- , "
                         "up to 128 characters, starting with a letter or digit; a declared "
                         "sender's order: its name and ~ first)")


def check_state(process_state: str | None) -> None:
    if process_state is not None and process_state not in set(ProcessState):
        raise ValueError(f"{process_state[:40]!r} is not a state: "
                         f"{', '.join(ProcessState)} (or none for all)")


class OrderNotFound(LookupError):
    pass


# A bulk resubmit acts on at most this many orders per request: each is a read, a write and a
# message, and an operator reads the list back; more are done by asking again.
MAX_BULK = 100


def _whole(v: object) -> object:
    return int(v) if isinstance(v, float) and v.is_integer() else v


class BulkResubmitRequest(BaseModel):
    """The body of POST /api/resubmissions: which failed orders, and what to say."""

    model_config = ConfigDict(extra="forbid", strict=True)
    state: Literal["Error"] = Field("Error", description="Only a failed order can be "
                                                         "resubmitted.")
    since: AwareDatetime | None = Field(None, description="Only orders last updated (for a "
                                                          "failed one: when it failed) at or "
                                                          "after this time.")
    until: AwareDatetime | None = Field(None, description="... and before this time.")
    failed_step: str | None = Field(None, max_length=128, description="Only orders that "
                                                                      "failed at this step.")
    reason: str = Field("", max_length=MAX_REASON)
    force: bool = Field(False, description="Also orders whose compensation failed.")
    dry_run: bool = Field(True, description="Only say what would be resubmitted (the "
                                            "default: acting takes dry_run false).")
    # JSON has numbers, not integers: 33.0 is the integer 33 (as JSON Schema says), 33.5 none.
    limit: Annotated[int, BeforeValidator(_whole)] = Field(50, ge=1, le=MAX_BULK)

    @classmethod
    def from_body(cls, body: bytes) -> BulkResubmitRequest:
        try:
            return cls.model_validate_json(body or b"{}")
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "body"
            if err["type"] == "extra_forbidden":
                raise ValueError(f"{where} is not a field of a bulk resubmit (state, since, "
                                 "until, failed_step, reason, force, dry_run, limit)") from None
            if err["loc"] == ("state",):
                raise ValueError("state: only orders in Error can be resubmitted") from None
            if err["type"] in ("json_invalid", "model_type"):
                raise ValueError('body must be a JSON object, e.g. {"since": '
                                 '"2026-11-25T08:00:00Z", "dry_run": true}') from None
            raise ValueError(f"{where}: {err['msg']}") from None


class CancelRequest(BaseModel):
    """The body of POST /api/orders/{id}/cancel: why (kept on the order's timeline)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str = Field(min_length=1, max_length=MAX_REASON)

    @classmethod
    def from_body(cls, body: bytes) -> CancelRequest:
        return _read(cls, body, "a cancel (reason)", '{"reason": "customer withdrew the order"}')


class PauseRequest(BaseModel):
    """The body of POST /api/pauses/{kind}/{name} (a reason, required) and of its resume (a
    reason, optional): kept in the audit log, and shown with the pause."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str = Field("", max_length=MAX_REASON)

    @classmethod
    def from_body(cls, body: bytes, *, required: bool) -> PauseRequest:
        ask = _read(cls, body, "a pause (reason)", '{"reason": "provider incident 4711"}')
        if required and not ask.reason:
            raise ValueError('a pause needs a reason, e.g. {"reason": "provider incident 4711"}')
        return ask


class ResumeRequest(BaseModel):
    """The body of POST /api/orders/{id}/resume (optional): why, kept on its timeline."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str = Field("", max_length=MAX_REASON)

    @classmethod
    def from_body(cls, body: bytes) -> ResumeRequest:
        return _read(cls, body, "a resume (reason)", '{"reason": "the customer confirmed"}')


class RedriveRequest(BaseModel):
    """The body of POST /api/redrives: which failed orders to resubmit in the background, at
    what pace, and why."""

    # Starting one (dry_run false) takes a reason that says something.
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "if": {"properties": {"dry_run": {"const": False}}, "required": ["dry_run"]},
        "then": {"properties": {"reason": {"pattern": "\\S"}}, "required": ["reason"]}})
    workflow: str | None = Field(None, max_length=64, description="Only orders of this "
                                                                  "workflow.")
    version: Annotated[int, Field(ge=1), BeforeValidator(_whole)] | None = Field(
        None, description="Only orders that started on this version of it.")
    failed_step: str | None = Field(None, max_length=128, description="Only orders that "
                                                                      "failed at this step.")
    error_text: str | None = Field(None, min_length=1, max_length=200, description=(
        "Only orders whose last error holds this text (any case)."))
    since: AwareDatetime | None = Field(None, description="Only orders that failed at or "
                                                          "after this time.")
    until: AwareDatetime | None = Field(None, description="... and before this time (and "
                                                          "never after the re-drive starts).")
    force: bool = Field(False, description="Also orders whose compensation failed.")
    reason: str = Field("", max_length=MAX_REASON, description="Why (required to act).")
    rate: float | None = Field(None, ge=0.01, le=1000, description=(
        "Orders resubmitted a second (default: the slowest limit among the workflow's "
        "services, or 10)."))
    dry_run: bool = Field(True, description="Only count what it would pick (the default: "
                                            "starting takes dry_run false).")

    @classmethod
    def from_body(cls, body: bytes) -> RedriveRequest:
        ask = _read(cls, body, "a re-drive (workflow, version, failed_step, error_text, "
                               "since, until, force, reason, rate, dry_run)",
                    '{"failed_step": "book_parcel", "reason": "carrier back", '
                    '"dry_run": true}')
        if not ask.dry_run and not ask.reason.strip():
            raise ValueError('a re-drive needs a reason, e.g. {"reason": "provider incident '
                             '4711 is over", "dry_run": false}')
        return ask


class BulkCancelRequest(BaseModel):
    """The body of POST /api/cancellations: which orders still running, and why."""

    model_config = ConfigDict(extra="forbid", strict=True)
    state: Literal["Pending", "Processing", "Parked"] | None = Field(
        None, description="Only orders in this state (none: Pending and Processing; Parked "
                          "ones, waiting for a person, only when asked for).")
    prefix: str | None = Field(None, pattern=ID_PREFIX_PATTERN,
                               description="Only orders whose id starts with this.")
    since: AwareDatetime | None = Field(None, description="Only orders received at or after "
                                                          "this time.")
    until: AwareDatetime | None = Field(None, description="... and before this time.")
    reason: str = Field(min_length=1, max_length=MAX_REASON)
    dry_run: bool = Field(True, description="Only say what would be cancelled (the default: "
                                            "acting takes dry_run false).")
    limit: Annotated[int, BeforeValidator(_whole)] = Field(50, ge=1, le=MAX_BULK)

    @classmethod
    def from_body(cls, body: bytes) -> BulkCancelRequest:
        return _read(cls, body, "a bulk cancel (state, prefix, since, until, reason, dry_run, "
                     "limit)", '{"state": "Pending", "reason": "supplier recall", '
                     '"dry_run": true}')


M = TypeVar("M", bound=BaseModel)


def _read(model: type[M], body: bytes, what: str, example: str) -> M:
    """A request body, or ValueError saying in a sentence what is wrong with it."""
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "body"
        if err["type"] == "extra_forbidden":
            raise ValueError(f"{where} is not a field of {what}") from None
        if err["type"] in ("json_invalid", "model_type"):
            raise ValueError(f"body must be a JSON object, e.g. {example}") from None
        if err["type"] == "missing":
            raise ValueError(f"{where} is required") from None
        raise ValueError(f"{where}: {err['msg']}") from None


class CancelRefused(Exception):
    """A cancel that does not apply to the order as it is: 409, saying why."""


class ResumeRefused(Exception):
    """A resume of an order that is not parked (or moved meanwhile): 409, saying why."""


# An alert's id: its day's partition and its row key (alert_row_key), joined by a dot.
# The earliest rows end in 8 hex digits (docs/upgrades.md), later ones in 12: both are listed,
# both acknowledged.
ALERT_ID = re.compile(r"^(\d{8})\.(\d{13}-(?:[0-9a-f]{12}|[0-9a-f]{8}))$")
# An acknowledgement's note is kept on the alert row: a sentence.
MAX_NOTE = 500


class AckRequest(BaseModel):
    """The body of POST /api/alerts/{id}/ack (optional as a whole)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    note: str = Field("", max_length=MAX_NOTE)

    @classmethod
    def from_body(cls, body: bytes) -> AckRequest:
        if not body.strip():
            return cls()
        try:
            return cls.model_validate_json(body)
        except ValidationError as e:
            err = e.errors()[0]
            if err["type"] == "extra_forbidden":
                raise ValueError(f"{'.'.join(map(str, err['loc']))} is not a field of an "
                                 "acknowledgement (note)") from None
            if err["type"] in ("json_invalid", "model_type"):
                raise ValueError('body must be a JSON object, e.g. {"note": "card service '
                                 'back"}') from None
            raise ValueError(f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}"
                             ) from None


def check_alert_id(alert_id: str) -> tuple[str, str]:
    m = ALERT_ID.match(alert_id)
    if not m:
        raise ValueError(f"{alert_id[:80]!r} is not an alert id (as `orders alerts` and the "
                         "API list it: YYYYMMDD.<13 digits>-<12 hex digits>)")
    return m.group(1), m.group(2)


class ResubmitRefused(Exception):
    pass
