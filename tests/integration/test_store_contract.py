"""One contract, two stores: the in-memory fake the service-layer tests use and the Table
Storage adapter against Azurite must behave the same, or the fast tests prove nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.state_store import (
    ConcurrencyConflict,
    OrderAlreadyExists,
    OrderStore,
    TableOrderStore,
)
from shared.adapters.tick_log import TableTickLog, TickLogStore
from shared.domain.order import parse_order
from shared.domain.outages import TickLog
from shared.domain.state import ProcessState, receive
from shared.domain.workflow import ORDER_FULFILMENT
from tests.fakes import FakeOrderStore, FakeTickLog
from tests.integration.helpers import order

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.fixture(params=["fake", "table"])
def store(request: pytest.FixtureRequest,
          app_env: Callable[..., dict[str, str]]) -> Iterator[OrderStore]:
    if request.param == "fake":
        yield FakeOrderStore()
        return
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    yield TableOrderStore(c.tables.get_table_client(c.settings.state_table),
                          c.tables.get_table_client(c.settings.inflight_table))


def create(store: OrderStore, order_id: str = "o-1", **changes: str):  # type: ignore[no-untyped-def]
    o = parse_order(json.dumps(order(order_id, **changes)))
    return o, store.create(o, receive(order_id, ORDER_FULFILMENT, T0))


def test_create_then_read_back(store: OrderStore) -> None:
    o, saved = create(store)
    assert saved.version
    loaded = store.load("o-1")
    assert loaded is not None and loaded.fingerprint == o.fingerprint()
    assert loaded.state == saved and loaded.state.version == saved.version
    assert loaded.state.outbox == saved.outbox != []
    assert store.get_state("o-1") == saved
    assert store.load("nope") is None and store.get_state("nope") is None


def test_a_second_create_names_the_first_ones_fingerprint(store: OrderStore) -> None:
    o, _ = create(store)
    with pytest.raises(OrderAlreadyExists) as e:
        create(store, customer_id="other")
    assert e.value.fingerprint == o.fingerprint()


def test_save_is_conditional_on_the_version_read(store: OrderStore) -> None:
    _, saved = create(store)
    first = store.get_state("o-1")
    second = store.get_state("o-1")
    assert first is not None and second is not None
    first.process_state = ProcessState.PROCESSING
    new = store.save(first)
    assert new.version != saved.version
    second.failure_count = 9
    with pytest.raises(ConcurrencyConflict):
        store.save(second)
    current = store.get_state("o-1")
    assert current is not None and current.process_state is ProcessState.PROCESSING
    assert current.failure_count == 0


def test_confirming_an_outbox_clears_it_only_on_the_version_it_was_read_with(
        store: OrderStore) -> None:
    _, saved = create(store)
    confirmed = store.confirm_outbox(saved)
    assert confirmed.outbox == [] and confirmed.version != saved.version
    current = store.get_state("o-1")
    assert current is not None and current.outbox == [] and current.version == confirmed.version
    assert current.outbox_seq == saved.outbox_seq
    with pytest.raises(ConcurrencyConflict):
        store.confirm_outbox(saved)


def test_the_in_flight_index_is_keyed_by_generation(store: OrderStore) -> None:
    assert store.track("o-1", 0, T0) is True
    assert store.track("o-1", 0, T0) is False  # already there: not this caller's
    assert store.track("o-1", 1, T0) is True
    assert sorted((e.order_id, e.generation) for e in store.in_flight()) == [
        ("o-1", 0), ("o-1", 1)]
    store.forget("o-1", 0)
    store.forget("o-1", 0)  # idempotent
    (entry,) = store.in_flight()
    assert (entry.order_id, entry.generation, entry.since) == ("o-1", 1, T0)
    store.quarantine(entry, "v-bad")
    (entry,) = store.in_flight()
    assert entry.unreadable == "v-bad"
    store.forget("o-1", 1)
    store.quarantine(entry, "v-bad")  # gone meanwhile: nothing to mark, no error
    assert list(store.in_flight()) == []


@pytest.fixture(params=["fake", "table"])
def tick_log(request: pytest.FixtureRequest,
             app_env: Callable[..., dict[str, str]]) -> Iterator[TickLogStore]:
    if request.param == "fake":
        yield FakeTickLog()
        return
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    yield TableTickLog(c.tables.get_table_client(c.settings.inflight_table))


def test_the_tick_log_reads_back_what_was_written_and_refuses_a_stale_write(
        tick_log: TickLogStore) -> None:
    empty, v0 = tick_log.read()
    assert empty == TickLog() and v0 is None
    log = TickLog().after_tick(T0, timedelta(seconds=75)).after_tick(
        T0 + timedelta(seconds=200), timedelta(seconds=75))
    tick_log.write(log, v0)
    read, v1 = tick_log.read()
    assert read == log and v1 is not None
    with pytest.raises(ConcurrencyConflict):
        tick_log.write(log, v0)  # someone wrote since v0
    tick_log.write(read.after_tick(T0 + timedelta(seconds=230), timedelta(seconds=75)), v1)
    with pytest.raises(ConcurrencyConflict):
        tick_log.write(log, v1)


def test_the_tick_log_is_not_in_the_in_flight_index(app_env: Callable[..., dict[str, str]]
                                                    ) -> None:
    from shared import bootstrap

    app_env()
    c = bootstrap.container()
    TableTickLog(c.tables.get_table_client(c.settings.inflight_table)).write(
        TickLog().after_tick(T0, timedelta(seconds=75)), None)
    assert list(c.store.in_flight()) == []
