"""The throughput bound prices every request a run makes of Azurite, each at its own kind's rate."""

from __future__ import annotations

import pytest

from localrun.bench.bench import BATCH, best_rates, every_request_seconds, ratio_by_side

CEILING = {"conditional_writes_per_s": 500.0, "point_reads_per_s": 1000.0,
           "transactions_per_s": 250.0,
           "queue_sends_per_s": 400.0, "queue_receives_1_per_s": 800.0,
           f"queue_receives_{BATCH}_per_s": 200.0, "queue_deletes_per_s": 800.0,
           "empty_polls_per_s": 1000.0}
COSTS = {"table_writes": 10.0, "table_reads": 3.0, "queue_sends": 6.0, "queue_receives": 7.0,
         "queue_deletes": 7.0, "queue_updates": 0.0, "queue_empty_polls": 2.0,
         "write_breakdown": {"table.batch": 1.0, "table.write": 9.0},
         "local_service_bus": {}}
NO_SIMULATORS = {"table_writes": 0.0, "table_reads": 0.0}


def test_each_kind_is_priced_at_its_own_rate_and_the_simulators_count() -> None:
    parts = every_request_seconds(COSTS, {"table_writes": 3.0, "table_reads": 1.0}, CEILING)
    assert parts == pytest.approx({
        # intake's entity-group transaction at its own rate, the nine other writes at theirs
        "table_writes": 1 / 250 + 9 / 500, "table_reads": 3 / 1000,
        "queue_sends": 7 / 400,  # the app's six and the Service Bus message
        "queue_receives": 7 / 800, "queue_deletes": 7 / 800, "queue_empty_polls": 2 / 1000,
        # The simulated services' own writes and reads take the same Azurite's time.
        "simulated_services": 3 / 500 + 1 / 1000})


@pytest.mark.parametrize(("receives", "messages", "seconds"), [
    (1, BATCH, 1 / 200),          # one full batch: what a receive of 16 costs
    (BATCH, BATCH, BATCH / 800),  # one message each: sixteen single receives
    (2, BATCH, 2 / 800 + (BATCH - 2) * (1 / 200 - 1 / 800) / (BATCH - 1)),
])
def test_a_receive_is_priced_by_the_messages_it_brings(receives: int, messages: int,
                                                        seconds: float) -> None:
    costs = {**COSTS, "queue_receives": receives, "queue_deletes": messages}
    assert every_request_seconds(costs, NO_SIMULATORS, CEILING)["queue_receives"] == \
        pytest.approx(seconds)


def test_the_ceiling_asks_through_the_app_s_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client on the SDK's default transport spends CPU per request that the app's does not
    (~/.netrc, proxy variables), and on this machine the ceiling is CPU-bound: it must ask as
    the app does, or the bound is low."""
    from localrun.bench.bench import Bench, Scale
    from shared.adapters.storage import POOL_SIZE
    from shared.settings import AZURITE_CONNECTION

    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for client in Bench(AZURITE_CONNECTION, Scale()).ceiling_clients():  # no request is made
        session = client._client._client._pipeline._transport.session
        assert session.trust_env is False
        assert session.get_adapter("http://127.0.0.1")._pool_maxsize == POOL_SIZE


def test_the_service_bus_stand_in_s_requests_take_azurite_s_time_too() -> None:
    """Not storage transactions (Service Bus operations in Azure), but the same Azurite serves
    them in the run: one receive of one message, its delete, and an empty poll."""
    with_sb = every_request_seconds(
        {**COSTS, "local_service_bus": {"receive": 1.0, "delete": 1.0, "receive.empty": 1.0}},
        NO_SIMULATORS, CEILING)
    without = every_request_seconds(COSTS, NO_SIMULATORS, CEILING)
    assert with_sb["queue_deletes"] - without["queue_deletes"] == pytest.approx(1 / 800)
    assert with_sb["queue_receives"] - without["queue_receives"] == pytest.approx(1 / 800)
    assert with_sb["queue_empty_polls"] - without["queue_empty_polls"] == pytest.approx(1 / 1000)


def test_each_kind_is_priced_at_the_best_rate_one_or_two_client_processes_reached() -> None:
    """The app is two processes (host and worker): a kind two client processes served faster
    is priced at their rate, and one they served slower at one process's."""
    two = {**{k: 1.4 * v for k, v in CEILING.items()}, "queue_deletes_per_s": 700.0}
    best = best_rates(CEILING, two)
    assert best["conditional_writes_per_s"] == pytest.approx(700.0)
    assert best["queue_deletes_per_s"] == 800.0
    assert sum(every_request_seconds(COSTS, NO_SIMULATORS, best).values()) < sum(
        every_request_seconds(COSTS, NO_SIMULATORS, CEILING).values())


def test_the_report_gives_the_ratio_against_each_sides_ceilings_when_it_has_them() -> None:
    sides = {"before": 0.51, "after": 0.69}
    text = ratio_by_side({"ratio_to_every_request_bound_by_side": sides})
    assert "51% against the ceilings measured before the run alone" in text
    assert "69% against those after it" in text
    # A report from before the two were kept (priced again with --price-only) says nothing.
    assert ratio_by_side({}) == ""
