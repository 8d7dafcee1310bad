"""Telemetry that costs less than the work: a fault-free order's trace is kept by its trace id
(OrderTraceSampleRatio of them, whole), and an order in trouble is kept from the moment the app
learns of it, in whichever process the next span starts."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind

from shared import sampling, tracing
from shared.adapters.remote_service import PermanentServiceError
from shared.domain.messages import AgentRequest
from shared.settings import DEFAULT_SAMPLE_RATIO
from tests.conftest import FakeClock
from tests.unit.test_agent import Script, agent, request

UNSAMPLED = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-00"


@pytest.fixture
def exported() -> Iterator[tuple[InMemorySpanExporter, sampling.OrderSampler]]:
    """The app's sampler at 0: only what trouble keeps is exported."""
    sampler = sampling.OrderSampler(0.0)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    yield exporter, sampler
    tracing.use_provider(None)
    provider.shutdown()


def test_keep_marks_a_context_sampled_and_changes_nothing_else() -> None:
    assert tracing.keep(UNSAMPLED) == UNSAMPLED[:-2] + "01"
    assert tracing.keep(UNSAMPLED[:-2] + "03") == UNSAMPLED[:-2] + "03"
    assert tracing.keep(None) is None and tracing.keep("not a context") == "not a context"
    odd = UNSAMPLED[:-2] + "zz"  # the right length, not hex: left alone, never an error
    assert tracing.keep(odd) == odd


class _SeededIds(IdGenerator):
    """Random ids from a fixed seed: the share kept is the same on every run (with the SDK's
    own ids, a share 0.03 off 0.5 is 2.7 standard deviations: about one run in 140 failed)."""

    def __init__(self) -> None:
        self._random = random.Random(20261126)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64)

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128)


@pytest.mark.parametrize("ratio", [0.0, 0.05, 0.5, 1.0])
def test_a_ratio_keeps_that_share_of_orders_whole(ratio: float) -> None:
    """Every span of one trace decides alike (by the trace id), so an order is kept or dropped
    whole; over many orders, about ``ratio`` of them are kept."""
    sampler = sampling.OrderSampler(ratio)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler, id_generator=_SeededIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        for _ in range(2_000):
            with tracing.span("intake", parent=None):
                sent = tracing.current_traceparent()
            with tracing.span("scheduler start", parent=sent):
                pass
    finally:
        tracing.use_provider(None)
        provider.shutdown()
    spans = exporter.get_finished_spans()
    by_trace: dict[int, int] = {}
    for s in spans:
        by_trace[s.context.trace_id] = by_trace.get(s.context.trace_id, 0) + 1
    assert all(n == 2 for n in by_trace.values())  # whole orders
    assert abs(len(by_trace) / 2_000 - ratio) <= 0.03
    # Application Insights counts each kept item as 100/rate of them.
    assert all(s.attributes[sampling.SAMPLE_RATE_ATTRIBUTE] == 100 * ratio for s in spans)


def test_a_span_whose_parent_was_kept_for_trouble_is_kept_and_counted_once(
        exported: tuple[InMemorySpanExporter, sampling.OrderSampler]) -> None:
    exporter, _ = exported
    with tracing.span("intake", parent=UNSAMPLED):
        pass
    with tracing.span("supervisor retry", parent=UNSAMPLED, trouble=True):
        after = tracing.current_traceparent()
    with tracing.span("scheduler command", parent=after):
        pass
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["supervisor retry", "scheduler command"]
    assert all(s.attributes[sampling.SAMPLE_RATE_ATTRIBUTE] == 100.0
               for s in exporter.get_finished_spans())
    assert all(format(s.context.trace_id, "032x") == UNSAMPLED[3:35]
               for s in exporter.get_finished_spans())


def test_an_agents_refusal_keeps_the_orders_trace_from_its_reply_on(
        exported: tuple[InMemorySpanExporter, sampling.OrderSampler]) -> None:
    exporter, _ = exported
    clock = FakeClock()
    traced = AgentRequest.model_validate_json(request(clock)).model_copy(
        update={"traceparent": UNSAMPLED}).to_json()
    ok = agent(clock, Script(clock, {"status": "applied"})).handle(traced)
    assert ok is not None and ok.traceparent is not None and ok.traceparent.endswith("-00")
    refused = agent(clock, Script(clock, PermanentServiceError("HTTP 422 no"))).handle(traced)
    assert refused is not None and refused.outcome == "permanent_error"
    assert refused.traceparent is not None and refused.traceparent.endswith("-01")
    assert tracing.trace_id(refused.traceparent) == UNSAMPLED[3:35]
    assert exporter.get_finished_spans() == ()  # the Agent's own spans: before it knew
    with tracing.span("scheduler reply", parent=refused.traceparent, kind=SpanKind.CONSUMER):
        pass
    assert [s.name for s in exporter.get_finished_spans()] == ["scheduler reply"]


def test_the_sample_ratio_is_a_setting_named_when_wrong() -> None:
    from shared.settings import SettingsError, load_settings

    base = {"AzureWebJobsStorage": "UseDevelopmentStorage=true", "SimulatorsEnabled": "true"}
    assert load_settings(base).trace_sample_ratio == DEFAULT_SAMPLE_RATIO
    assert load_settings({**base, "OrderTraceSampleRatio": "1"}).trace_sample_ratio == 1
    with pytest.raises(SettingsError, match="OrderTraceSampleRatio"):
        load_settings({**base, "OrderTraceSampleRatio": "2"})
