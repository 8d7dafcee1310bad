"""A Service Bus message that lives a day or more reaches the app: its TimeToLive, a .NET
TimeSpan, is read rather than failing the binding conversion before intake runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from azure.functions.servicebus import ServiceBusMessageInConverter

from localrun.host import triggers
from shared import bindings_compat


@pytest.mark.parametrize(("text", "expected"), [
    ("7.00:00:00", timedelta(days=7)),
    ("14.00:00:00", timedelta(days=14)),
    ("00:05:00", timedelta(minutes=5)),
    ("1.02:03:04.5000000", timedelta(days=1, hours=2, minutes=3, seconds=4, milliseconds=500)),
    ("10675199.02:48:05.4775807", timedelta(days=10675199, hours=2, minutes=48, seconds=5,
                                            microseconds=477580)),
    ("-00:00:01", timedelta(seconds=-1)),
])
def test_a_timespan_reads_as_dotnet_writes_it(text: str, expected: timedelta) -> None:
    assert bindings_compat.timespan(text) == expected


@pytest.mark.parametrize("td", [timedelta(days=14), timedelta(minutes=5),
                                timedelta(days=1, seconds=3, milliseconds=250)])
def test_the_local_service_bus_writes_a_timespan_the_app_reads_back(td: timedelta) -> None:
    assert bindings_compat.timespan(triggers._timespan(td)) == td


def test_a_message_that_lives_seven_days_converts_once_installed() -> None:
    bindings_compat.install()
    now = datetime.now(UTC)
    msg = triggers.service_bus_message(
        "intake", body=b"{}", message_id="m-1", content_type=None, application_properties={},
        delivery_count=1, sequence_number=1, enqueued=now, time_to_live=timedelta(days=7),
        lock_token="t", locked_until=now)
    assert msg.time_to_live == timedelta(days=7) and msg.message_id == "m-1"


def test_the_library_alone_still_fails_on_a_day_long_timespan() -> None:
    """Upstream azure-functions parses hh:mm:ss only. When this fails, the library reads
    TimeSpans itself and bindings_compat can go."""
    with pytest.raises(ValueError):
        bindings_compat._library_parse("7.00:00:00")


def test_whatever_is_no_timespan_is_left_to_the_library() -> None:
    bindings_compat.install()
    assert ServiceBusMessageInConverter._parse_timedelta("300") == timedelta(seconds=300)
    with pytest.raises(ValueError):
        ServiceBusMessageInConverter._parse_timedelta("seven days")
