"""Order validation and settings validation: bad input gets a reason that names the problem."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.configuration import resolve
from shared.domain import budget
from shared.domain.workflow import Registry, Step, Workflow
from shared.settings import (
    LOCAL_SIMULATORS,
    SettingsError,
    load_settings,
    service_setting_names,
)
from shared.workflows.orders.message import InvalidOrder, parse_order
from tests.workflow import FLOW, REGISTRY

GOOD = {"order_id": "o-1", "customer_id": "c-1",
        "items": [{"sku": "A", "quantity": 2, "unit_price": "9.99"}]}


def body(**changes: object) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def test_a_valid_order_parses_and_totals() -> None:
    o = parse_order(body())
    assert str(o.total) == "19.98"
    assert o.fingerprint() == parse_order(body()).fingerprint()
    assert o.fingerprint() != parse_order(body(customer_id="c-2")).fingerprint()


@pytest.mark.parametrize(("changes", "reason"), [
    ({"order_id": "a/b"}, "order_id"),
    ({"order_id": "a#b"}, "order_id"),
    ({"order_id": "a?b"}, "order_id"),
    ({"order_id": "x" * 200}, "order_id"),
    ({"order_id": ""}, "order_id"),
    ({"customer_id": ""}, "customer_id"),
    ({"customer_id": "c\x00"}, "customer_id"),
    ({"items": [{"sku": "A\n", "quantity": 1, "unit_price": "1"}]}, "sku"),
    ({"items": []}, "items"),
    ({"items": [{"sku": "A", "quantity": 0, "unit_price": "1"}]}, "quantity"),
    ({"items": [{"sku": "A", "quantity": 1, "unit_price": "-1"}]}, "unit_price"),
    ({"items": [{"sku": "A", "quantity": 1}]}, "unit_price"),
    ({"reply_to": "Not_A_Queue"}, "reply_to"),
    ({"reply_to": "a--b"}, "reply_to"),
    ({"schema_version": 2}, "schema_version"),
    ({"surprise": 1}, "surprise"),
])
def test_invalid_orders_name_the_field(changes: dict[str, object], reason: str) -> None:
    with pytest.raises(InvalidOrder, match=reason):
        parse_order(body(**changes))


# Any character a schema-valid text may hold, weighted to the widest stored (a JSON escape or a
# character outside the BMP counts two UTF-16 units).
_wide = st.sampled_from('"\\\U0001F600\U00010000') | st.characters(
    blacklist_categories=("Cs",), blacklist_characters="".join(map(chr, [*range(32), 127])))


@settings(max_examples=40, deadline=None)
@given(sku=st.text(_wide, min_size=64, max_size=64),
       customer=st.text(_wide, min_size=128, max_size=128),
       reply_to=st.sampled_from([None, "r" * 63]))
def test_every_order_the_schema_takes_fits_in_one_stored_property(
        sku: str, customer: str, reply_to: str | None) -> None:
    """The published limits (docs/limits.md) keep the largest valid order storable: the stored
    document stays within Table Storage's string property, with room to spare."""
    o = parse_order(body(order_id="o" * 128, customer_id=customer, reply_to=reply_to,
                         items=[{"sku": sku, "quantity": 10_000, "unit_price": "9999999999.99"}]
                         * 100))
    assert budget.json_units(o.document()) <= budget.STRING_PROPERTY * 2 // 3


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b"\xff\xfe"])
def test_garbage_is_invalid_not_a_crash(raw: bytes) -> None:
    with pytest.raises(InvalidOrder):
        parse_order(raw)


# The settings are the engine's: checked on its test workflow (tests/workflow.py: services
# alpha, beta, gamma; steps hold, take, send), not the shipped example.
# As locally: the services are the local host's simulated ones unless a test says otherwise.
BASE = {"AzureWebJobsStorage": "UseDevelopmentStorage=true", "SimulatorsEnabled": "true"}


def test_defaults_are_sensible() -> None:
    s = load_settings(BASE)
    assert s.failure_threshold == 3
    assert s.effective_storage_connection and "127.0.0.1:10002" in s.effective_storage_connection
    config = resolve(s, REGISTRY)
    assert config.workflows == REGISTRY
    assert config.services["alpha"].queue == "alpha-requests"
    assert not config.reply_queues.allow("order-status-42")  # no reply queue by default


@pytest.mark.parametrize("allow_list", ["order-status-", "order-status-*", " x-, order-status-"])
def test_a_reply_queue_is_one_under_an_allowed_prefix(allow_list: str) -> None:
    """A trailing * is what earlier releases' glob setting said: it reads as the prefix."""
    allowed = resolve(load_settings({**BASE, "ReplyQueueAllowList": allow_list}),
                      REGISTRY).reply_queues.allow
    assert allowed("order-status-42")
    assert not allowed("orders-status-42") and not allowed("order-statu")


@pytest.mark.parametrize("queue", [
    "scheduler-commands", "agent-responses", "alpha-requests", "alpha-requests-poison",
    "scheduler-commands-poison", "azure-webjobs-blobtrigger-x", "fraud-q"])
def test_reply_to_never_names_a_queue_the_app_reads_whatever_the_allow_list_says(
        queue: str) -> None:
    """The widest list the setting takes, every letter and digit: the app's own queues (and
    those of a service renamed by its setting) stay out."""
    widest = ",".join("abcdefghijklmnopqrstuvwxyz0123456789")
    s = load_settings({**BASE, "ReplyQueueAllowList": widest, "FraudRequestsQueueName": "fraud-q"})
    fraud = Workflow("fraud-check", (Step("check", "fraud", "check", None,
                                          timedelta(seconds=5)),), message=FLOW.message)
    allowed = resolve(s, Registry.of([*REGISTRY.workflows, fraud],
                                     default=REGISTRY.default)).reply_queues.allow
    assert not allowed(queue)
    assert allowed("order-status-42")


@pytest.mark.parametrize("allow_list", ["*", "order-*-status", "order-status-?", "Order-", "-x"])
def test_an_allow_list_that_is_no_prefix_stops_the_app_and_names_the_setting(
        allow_list: str) -> None:
    with pytest.raises(SettingsError, match="ReplyQueueAllowList"):
        load_settings({**BASE, "ReplyQueueAllowList": allow_list})


@pytest.mark.parametrize(("name", "value"), [
    ("FailureThreshold", "0"),
    ("FailureThreshold", "three"),
    ("SchedulerQueueName", "Has_Upper"),
    ("StateTableName", "1table"),
    ("SupervisorSchedule", "*/5 * * * *"),
    ("RetryBackoffSeconds", "-1"),
    ("SimTransientErrorRate", "1.5"),
    ("AlphaServiceUrl", "ftp://x"),
    ("BetaRequestsQueueName", "Has_Upper"),
    ("StepBudgetSeconds", "take=soon"),
])
def test_a_wrong_setting_fails_fast_and_is_named(name: str, value: str) -> None:
    """Per-service settings (named by convention from the registered services) included."""
    with pytest.raises(SettingsError, match=name):
        resolve(load_settings({**BASE, name: value}), REGISTRY)


def test_missing_storage_is_named() -> None:
    with pytest.raises(SettingsError, match="AzureWebJobsStorage"):
        load_settings({})


def test_identity_based_storage_is_accepted() -> None:
    s = load_settings({"AzureWebJobsStorage__accountName": "acct",
                       "AzureWebJobsStorage__clientId": "00000000-0000-0000-0000-000000000000"})
    assert s.effective_storage_connection is None


def test_step_budgets_override_the_workflow() -> None:
    s = load_settings({**BASE, "StepBudgetSeconds": "take=7, send=9"})
    wf = resolve(s, REGISTRY).workflows.get(FLOW.name)
    assert wf.step("take").budget.total_seconds() == 7
    assert wf.step("send").budget.total_seconds() == 9
    with pytest.raises(SettingsError, match="StepBudgetSeconds"):
        resolve(load_settings({**BASE, "StepBudgetSeconds": "nope=3"}), REGISTRY)


def test_backoff_cap_below_base_is_refused() -> None:
    with pytest.raises(SettingsError, match="RetryBackoffMaxSeconds"):
        load_settings({**BASE, "RetryBackoffSeconds": "10", "RetryBackoffMaxSeconds": "5"})


def test_a_breaker_window_shorter_than_a_call_is_refused() -> None:
    with pytest.raises(SettingsError, match="CircuitBreakerWindowSeconds"):
        load_settings({**BASE, "AgentCallTimeoutSeconds": "30",
                       "CircuitBreakerWindowSeconds": "20"})


@pytest.mark.parametrize(("given", "url"), [
    ({}, "http://localhost:7071/api/sim/beta"),
    ({"SimulatorsEnabled": "false", "SimulatorBaseUrl": "https://demo.example/api/sim"},
     "https://demo.example/api/sim/beta"),
    ({"SimulatorsEnabled": "false", "BetaServiceUrl": "https://beta.example"},
     "https://beta.example"),
])
def test_a_service_without_its_own_url_is_the_simulated_one_where_there_are_any(
        given: dict[str, str], url: str) -> None:
    others = {service_setting_names(x)[0]: f"https://{x}" for x in REGISTRY.services
              if x != "beta"}
    s = load_settings({**BASE, **others, **given})
    assert resolve(s, REGISTRY).services["beta"].url == url


def test_a_deployment_without_simulators_needs_every_services_url() -> None:
    """Every service but one has its URL: the one without is named (whichever the workflows
    call, so that adding a service breaks no test of the engine)."""
    first, *others = REGISTRY.services
    given = {service_setting_names(s)[0]: f"https://{s}.example" for s in others}
    with pytest.raises(SettingsError, match=f"not set: {service_setting_names(first)[0]} "):
        resolve(load_settings({**BASE, "SimulatorsEnabled": "false", **given}), REGISTRY)


def test_a_deployment_without_service_urls_fails_fast_naming_them() -> None:
    from shared.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match="AlphaServiceUrl=''"):
        resolve(load_settings({"AzureWebJobsStorage": "UseDevelopmentStorage=true",
                               "AlphaServiceUrl": "", "BetaServiceUrl": "https://beta"}),
                REGISTRY)


@pytest.mark.parametrize("url", [
    "http://beta.example", "http://10.0.0.5:8080/api", "http://localhost.example/x",
    "http://127.0.0.1.example", "ftp://beta.example", "https://", "beta.example", "https://x:y"])
@pytest.mark.parametrize("setting", ["BetaServiceUrl", "SimulatorBaseUrl"])
def test_a_service_url_over_plain_http_to_another_machine_stops_the_app_naming_it(
        setting: str, url: str) -> None:
    """Issue 32: every call carries the order and RemoteServiceKey; plain http would put both
    on the network in clear, so it is taken only to this machine."""
    with pytest.raises(SettingsError, match=rf"{setting}=.*(https|not a URL)"):
        resolve(load_settings({**BASE, setting: url}), REGISTRY)


@pytest.mark.parametrize("url", [
    "https://beta.example", "https://beta.example:8443/api", "http://127.0.0.1:7071/api/sim",
    "http://localhost:7071/api/sim", "http://[::1]:7071/api/sim", "http://LocalHost:7071/api/sim"])
def test_https_anywhere_and_plain_http_to_this_machine_are_taken(url: str) -> None:
    """What the local host, the demo and the end-to-end tests give (loopback) and what a
    deployment gives (https)."""
    s = load_settings({**BASE, "SimulatorBaseUrl": url, "BetaServiceUrl": url})
    services = resolve(s, REGISTRY).services
    assert services["beta"].url == url
    assert {v.url for k, v in services.items() if k != "beta"} \
        == {f"{url}/{k}" for k in services if k != "beta"}


def test_the_local_simulators_default_is_taken() -> None:
    """No SimulatorBaseUrl, simulators on: the local host's own address, plain http."""
    s = load_settings(BASE)
    assert {v.url for v in resolve(s, REGISTRY).services.values()} \
        == {f"{LOCAL_SIMULATORS}/{k}" for k in REGISTRY.services}


@pytest.mark.parametrize(("schedule", "gap"), [
    ("*/30 * * * * *", 45), ("*/10 * * * * *", 15), ("0 */5 * * * *", 450),
    ("0 * * * * *", 90), ("0 0 */2 * * *", 10800)])
def test_the_outage_gap_follows_the_supervisor_schedule(schedule: str, gap: float) -> None:
    """A tick missed is an outage at any schedule: a 20 s outage under */10 was never seen
    with the fixed 25 s gap (three failed ticks' worth, not one)."""
    s = load_settings({"AzureWebJobsStorage": "UseDevelopmentStorage=true",
                       "SupervisorSchedule": schedule})
    assert s.outage_gap_seconds == gap
    assert load_settings({"AzureWebJobsStorage": "UseDevelopmentStorage=true",
                          "SupervisorSchedule": schedule,
                          "OutageGapSeconds": "7"}).outage_gap_seconds == 7


def test_an_irregular_schedule_needs_its_outage_gap_named() -> None:
    with pytest.raises(SettingsError, match=r"SupervisorSchedule=.*OutageGapSeconds"):
        load_settings({"AzureWebJobsStorage": "UseDevelopmentStorage=true",
                       "SupervisorSchedule": "*/5 1 * * * *"})
