"""Trigger values as the Python worker builds them.

The host does not hand the worker objects: it sends the trigger's data and its trigger metadata as
typed values (``Datum``), and the worker turns them into ``func.QueueMessage``,
``func.ServiceBusMessage``, ``func.TimerRequest`` or ``func.HttpRequest`` with the converters of
the ``azure.functions`` library. The local host does the same, so a function sees here what it
will see in Azure: the Service Bus body decoded as UTF-8 text (bytes that are not UTF-8 replaced),
``metadata`` as a dict, Service Bus times naive (the extension sends them without an offset),
queue times aware, counts as ints.

``TriggerData`` is what the local host hands over for one invocation: the converter and the
host-shaped fields it takes, plain values that cross a process boundary as the host's gRPC
message does (worker.py); the value is built where the function runs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import azure.functions as func
from azure.functions.http import HttpRequestConverter
from azure.functions.meta import Datum
from azure.functions.queue import QueueMessageInConverter
from azure.functions.servicebus import ServiceBusMessageInConverter
from azure.functions.timer import TimerRequestConverter


@dataclass(frozen=True)
class TriggerData:
    """One invocation's trigger: ``build_with`` is one of this module's functions (picklable by
    name), ``fields`` its keyword arguments."""

    build_with: Callable[..., Any]
    fields: Mapping[str, Any]

    def build(self) -> Any:
        return self.build_with(**self.fields)


def _text(body: bytes) -> Datum:
    # The host passes a message body it can read as text as a string; what is not UTF-8 arrives
    # with replacement characters.
    return Datum(body.decode("utf-8", errors="replace"), "string")


def _json(value: Any) -> Datum:
    return Datum(json.dumps(value), "json")


def _offset_time(t: datetime | None) -> Datum | None:
    # A DateTimeOffset, serialised with its offset: the converter returns an aware datetime.
    return None if t is None else _json(t.astimezone(UTC).isoformat())


def _unspecified_time(t: datetime) -> Datum:
    # A .NET DateTime serialised without an offset: the converter returns a naive datetime.
    return _json(t.astimezone(UTC).replace(tzinfo=None).isoformat())


def _sys(method: str) -> Datum:
    return _json({"MethodName": method, "UtcNow": datetime.now(UTC).isoformat(),
                  "RandGuid": str(uuid.uuid4())})


def queue_message(function: str, *, body: bytes, id: str, dequeue_count: int,
                  inserted_on: datetime | None, expires_on: datetime | None,
                  next_visible_on: datetime | None, pop_receipt: str) -> func.QueueMessage:
    data = _text(body)
    metadata = {k: v for k, v in {
        "QueueTrigger": data,
        "Id": Datum(id, "string"),
        "DequeueCount": Datum(dequeue_count, "int"),
        "InsertionTime": _offset_time(inserted_on),
        "ExpirationTime": _offset_time(expires_on),
        "NextVisibleTime": _offset_time(next_visible_on),
        "PopReceipt": Datum(pop_receipt, "string"),
        "sys": _sys(function),
    }.items() if v is not None}
    return cast(func.QueueMessage, QueueMessageInConverter.decode(data, trigger_metadata=metadata))


def service_bus_message(function: str, *, body: bytes, message_id: str, content_type: str | None,
                        application_properties: Mapping[str, Any], delivery_count: int,
                        sequence_number: int, enqueued: datetime, time_to_live: timedelta,
                        lock_token: str, locked_until: datetime) -> func.ServiceBusMessage:
    props = dict(application_properties)
    metadata = {k: v for k, v in {
        "MessageId": Datum(message_id, "string"),
        "ContentType": None if content_type is None else Datum(content_type, "string"),
        "DeliveryCount": Datum(delivery_count, "int"),
        "SequenceNumber": Datum(sequence_number, "int"),
        "EnqueuedSequenceNumber": Datum(0, "int"),
        "EnqueuedTimeUtc": _unspecified_time(enqueued),
        "EnqueuedTime": _unspecified_time(enqueued),
        "TimeToLive": Datum(_timespan(time_to_live), "string"),
        "ExpiresAtUtc": _unspecified_time(enqueued + time_to_live),
        "ExpiresAt": _unspecified_time(enqueued + time_to_live),
        "LockedUntil": _unspecified_time(locked_until),
        "LockToken": Datum(lock_token, "string"),
        "State": Datum(0, "int"),
        "ApplicationProperties": _json(props),
        "UserProperties": _json(props),
        "MessageActions": _json({}),
        "sys": _sys(function),
    }.items() if v is not None}
    # One message (the trigger's cardinality is one): the worker's converter says either.
    return cast(func.ServiceBusMessage,
                ServiceBusMessageInConverter.decode(_text(body), trigger_metadata=metadata))


def _timespan(td: timedelta) -> str:
    """As .NET writes a TimeSpan (the extension's TimeToLive): ``[d.]hh:mm:ss[.fffffff]``."""
    ticks = round(td.total_seconds() * 10_000_000)
    seconds, fraction = divmod(ticks, 10_000_000)
    minutes, s = divmod(seconds, 60)
    hours, m = divmod(minutes, 60)
    days, h = divmod(hours, 24)
    text = f"{days}.{h:02d}:{m:02d}:{s:02d}" if days else f"{h:02d}:{m:02d}:{s:02d}"
    return f"{text}.{fraction:07d}" if fraction else text


def timer_request(*, past_due: bool, last: datetime | None, next: datetime) -> func.TimerRequest:
    # The monitor's record (use_monitor): the last run, the next, and when it was written.
    info = {"Schedule": {"AdjustForDST": True},
            "ScheduleStatus": {"Last": last.isoformat() if last else "0001-01-01T00:00:00",
                               "Next": next.isoformat(),
                               "LastUpdated": datetime.now(UTC).isoformat()},
            "IsPastDue": past_due}
    return cast(func.TimerRequest, TimerRequestConverter.decode(_json(info), trigger_metadata={}))


def http_request(*, method: str, url: str, headers: Mapping[str, str], query: Mapping[str, str],
                 route: Mapping[str, str], body: bytes) -> func.HttpRequest:
    def strings(d: Mapping[str, str]) -> dict[str, Datum]:
        return {k: Datum(v, "string") for k, v in d.items()}

    data = Datum({"method": Datum(method, "string"), "url": Datum(url, "string"),
                  "headers": strings(headers), "query": strings(query),
                  "params": strings(route), "body": Datum(body, "bytes")}, "http")
    return cast(func.HttpRequest, HttpRequestConverter.decode(data, trigger_metadata={}))
