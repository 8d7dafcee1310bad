"""The due-time index's keys: a key-range query by text must find exactly the entries whose time
has come, whatever the times, order ids and generations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from shared.adapters.state_store import entry_from_index
from shared.domain import due_index
from shared.domain.due_index import IndexKey

TIMES = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2999, 12, 31),
                     timezones=st.just(UTC))
ORDER_IDS = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")


@given(due=TIMES, now=TIMES, order_id=ORDER_IDS, generation=st.integers(0, 10**6))
def test_an_entry_is_in_range_exactly_when_its_time_has_come(
        due: datetime, now: datetime, order_id: str, generation: int) -> None:
    key = due_index.key_for(order_id, generation, due)
    assert (key.row <= due_index.due_by(now)) == (due <= now)
    assert key.partition == due_index.shard(order_id) in due_index.partitions()
    assert IndexKey.parse(str(key)) == key and key.due == due
    assert key.names() == (order_id, generation)


@given(a=TIMES, b=TIMES, ids=st.tuples(ORDER_IDS, ORDER_IDS))
def test_keys_sort_as_their_times(a: datetime, b: datetime, ids: tuple[str, str]) -> None:
    ka, kb = (due_index.key_for(i, 0, t) for i, t in zip(ids, (a, b), strict=True))
    if a < b:
        assert ka.row < kb.row


def test_a_new_entry_is_filed_within_the_horizon_unless_exact() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    due, horizon = t + timedelta(seconds=60), timedelta(seconds=30)
    assert due_index.file_at(due, t, horizon, exact=False) == t + horizon
    assert due_index.file_at(due, t, horizon, exact=True) == due
    assert due_index.file_at(t + timedelta(seconds=5), t, horizon, exact=False) == (
        t + timedelta(seconds=5))


def test_a_new_entry_is_needed_only_when_the_order_falls_due_before_its_own() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    recorded = str(due_index.key_for("o-1", 0, t))
    assert not due_index.new_key_needed(recorded, t, move=False)
    assert not due_index.new_key_needed(recorded, t + timedelta(seconds=1), move=False)
    assert due_index.new_key_needed(recorded, t - timedelta(microseconds=1), move=False)
    assert due_index.new_key_needed(recorded, t + timedelta(seconds=1), move=True)
    assert due_index.new_key_needed(None, t, move=False)  # a record from before the index
    assert not due_index.new_key_needed(recorded, None, move=True)  # settled
    legacy = str(due_index.legacy_key("o-1", 0))
    assert IndexKey.parse(legacy).due is None
    assert due_index.new_key_needed(legacy, t, move=False)


def test_index_entries_of_every_earlier_shape_are_read() -> None:
    """The entries earlier releases wrote read as entries of the order they name (the first
    releases' key alone: any generation); one that names no order reads with none, so the
    Supervisor drops it instead of failing its tick on it."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    shapes: dict[str, dict[str, object]] = {
        "inflight/o-a": {"Since": t0},  # d227dda..dff45f2: the order id alone
        "inflight/o-b@2": {"OrderID": "o-b", "Generation": 2, "Since": t0},  # 75e3701
        "inflight/o-c@1": {},  # nothing but the key
        f"{due_index.shard('o-d')}/20260101T000000.000000Z|o-d@0": {"Generation": "x"},
        "inflight/": {},
        "due-03/20260101T000000.000000Z|@": {},
    }
    read = {}
    for key, props in shapes.items():
        partition, _, row = key.partition("/")
        read[key] = entry_from_index({"PartitionKey": partition, "RowKey": row, **props})
    names = {k: (e.order_id, e.generation) for k, e in read.items()}
    assert names == {
        "inflight/o-a": ("o-a", None), "inflight/o-b@2": ("o-b", 2),
        "inflight/o-c@1": ("o-c", 1),
        f"{due_index.shard('o-d')}/20260101T000000.000000Z|o-d@0": ("o-d", 0),
        "inflight/": ("", None), "due-03/20260101T000000.000000Z|@": ("", None)}
    assert read["inflight/o-a"].since == t0
    assert read["inflight/o-c@1"].since < t0  # no time: old enough to drop once unnamed
