"""Where the Python library that turns trigger data into ``func.*`` objects reads less than the
Functions host sends, and a message would fail before the app's code runs.

A Service Bus message's ``TimeToLive`` reaches the worker as a .NET TimeSpan (``7.00:00:00``
for seven days, ``00:05:00.5000000``). azure-functions 1.26 parses only ``hh:mm:ss`` and whole
numbers, so a message that lives a day or more (the orders queue's default is 14 days) raised
``ValueError`` in the binding conversion: every delivery failed alike and the order was
dead-lettered unseen. ``install()`` teaches the Service Bus converter the TimeSpan form and leaves
every other input to the library.
"""

from __future__ import annotations

import re
from datetime import timedelta

import azure.functions.servicebus as servicebus

_TIMESPAN = re.compile(
    r"^(?P<sign>-)?(?:(?P<days>\d+)\.)?(?P<h>\d{1,2}):(?P<m>\d{2}):(?P<s>\d{2})"
    r"(?:\.(?P<frac>\d{1,7}))?$")
_library_parse = servicebus.ServiceBusMessageInConverter._parse_timedelta


def timespan(text: str | None) -> timedelta | None:
    """A .NET TimeSpan's text as a timedelta; None when it is not one."""
    m = _TIMESPAN.match(text or "")
    if m is None:
        return None
    td = timedelta(days=int(m["days"] or 0), hours=int(m["h"]), minutes=int(m["m"]),
                   seconds=int(m["s"]),
                   microseconds=int((m["frac"] or "0").ljust(7, "0")) // 10)
    return -td if m["sign"] else td


def _parse_timedelta(cls: type, timedelta_str: str | None) -> timedelta | None:
    return timespan(timedelta_str) or _library_parse(timedelta_str)


def install() -> None:
    servicebus.ServiceBusMessageInConverter._parse_timedelta = classmethod(  # type: ignore[method-assign,assignment]
        _parse_timedelta)
