"""One trace per order: a span for each invocation and each remote call attempt, and the W3C
trace context (``traceparent``) carried in every message, remote call and state record, so that
every hop of an order, the Supervisor's recoveries too, lands in its trace (docs/tracing.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
_W3C = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None


def use_provider(provider: TracerProvider | None) -> None:
    """The provider this app's spans go to (None: the global one, a no-op unless configured)."""
    global _provider
    _provider = provider


def tracer() -> trace.Tracer:
    return (_provider or trace.get_tracer_provider()).get_tracer("order_pipeline")


def configure(env: Mapping[str, str] = os.environ,
              sample_ratio: float | None = None) -> TracerProvider | None:
    """Set up exporting from the standard variables, once per process.

    In Azure the Python worker sets up the Azure Monitor distro itself before it imports the app
    (PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY, which the Bicep sets, so that the host stops
    forwarding the app's log records a second time): its provider is used as it is. Otherwise
    APPLICATIONINSIGHTS_CONNECTION_STRING sends traces and logs to Application Insights;
    OTEL_TRACES_EXPORTER=console prints spans, otlp sends them to OTEL_EXPORTER_OTLP_ENDPOINT
    (with the opentelemetry-exporter-otlp-proto-http package); none of them, nothing. Returns
    the provider in use, if any. ``sample_ratio``: OrderTraceSampleRatio (the app passes its
    setting; the default's otherwise: shared/sampling.py).
    """
    if _provider is not None:
        return _provider
    if sample_ratio is None:
        from shared.settings import DEFAULT_SAMPLE_RATIO

        sample_ratio = DEFAULT_SAMPLE_RATIO
    from opentelemetry.sdk.trace import TracerProvider as SdkProvider

    from shared.sampling import OrderSampler

    configured = trace.get_tracer_provider()
    if isinstance(configured, SdkProvider):  # by the worker: a second set-up would export twice
        # Its sampler is the one the worker read from OTEL_TRACES_SAMPLER; the app decides per
        # order. The provider hands each new tracer its sampler (tracer() asks every time).
        configured.sampler = OrderSampler(sample_ratio)
        use_provider(configured)
        return configured
    exporter_name = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if env.get("APPLICATIONINSIGHTS_CONNECTION_STRING") and exporter_name in ("",
                                                                           "azure_monitor"):
        return _azure_monitor(env, sample_ratio)
    if exporter_name in ("", "none"):
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

    exporter: SpanExporter
    if exporter_name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporter = ConsoleSpanExporter()
    elif exporter_name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            from shared.settings import SettingsError

            raise SettingsError("OTEL_TRACES_EXPORTER=otlp needs the package "
                                "opentelemetry-exporter-otlp-proto-http") from None
        exporter = OTLPSpanExporter()  # OTEL_EXPORTER_OTLP_ENDPOINT, as the standard says
    else:
        from shared.settings import SettingsError

        raise SettingsError(f"OTEL_TRACES_EXPORTER={exporter_name!r}: use console, otlp or none")
    provider = SdkProvider(sampler=OrderSampler(sample_ratio), resource=Resource.create(
        {"service.name": env.get("OTEL_SERVICE_NAME", "order-pipeline")}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    use_provider(provider)
    return provider


# The app's spans are the order's trace. The Azure SDK's and the HTTP libraries' own would add a
# dependency per storage request (dozens per order, each billed), and the app serves no web
# framework. The Bicep gives the worker the same list (OTEL_PYTHON_DISABLED_INSTRUMENTATIONS).
NOT_INSTRUMENTED = ("azure_sdk", "django", "fastapi", "flask", "httpx", "httpx2", "psycopg2",
                    "requests", "urllib", "urllib3")


# The distro's own sampler (no OTEL_TRACES_SAMPLER) is rate-limited, about 5 spans a second,
# deciding span by span: it would keep or drop an order's spans one by one. Whatever the worker set
# up, the app's OrderSampler decides (configure()); the Bicep still names the fixed-percentage
# one for the worker, so that nothing it starts before the app loads is rate-limited.
TRACES_SAMPLER = ("microsoft.fixed_percentage", "1.0")
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def keep(traceparent: str | None) -> str | None:
    """``traceparent`` marked sampled: the order is in trouble, keep its trace from here on."""
    if traceparent is None or not _TRACEPARENT.fullmatch(traceparent):
        return traceparent  # not W3C: left as it is, and a reader starts a new trace from it
    return traceparent[:53] + format(int(traceparent[53:], 16) | 1, "02x")


def _azure_monitor(env: Mapping[str, str], sample_ratio: float) -> TracerProvider:
    """Traces and logs to Application Insights (the Azure Monitor distro). The exporter itself
    reads APPLICATIONINSIGHTS_AUTHENTICATION_STRING: with Authorization=AAD (as the Bicep sets
    it, Application Insights having local authentication off) it sends as the managed identity."""
    from azure.monitor.opentelemetry import configure_azure_monitor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkProvider

    from shared.sampling import OrderSampler
    from shared.settings import SettingsError

    try:
        configure_azure_monitor(
            connection_string=env["APPLICATIONINSIGHTS_CONNECTION_STRING"],
            instrumentation_options={name: {"enabled": False} for name in NOT_INSTRUMENTED},
            # Per-interval metrics nobody here reads; each is an ingested item.
            enable_live_metrics=False, enable_performance_counters=False,
            resource=Resource.create(
                {"service.name": env.get("OTEL_SERVICE_NAME", "order-pipeline")}))
    except ValueError as e:
        raise SettingsError(f"APPLICATIONINSIGHTS_CONNECTION_STRING: {e}") from None
    provider = trace.get_tracer_provider()
    if isinstance(provider, SdkProvider):
        provider.sampler = OrderSampler(sample_ratio)  # as for the worker's (configure())
    use_provider(provider)
    return provider


def current_traceparent() -> str | None:
    """The active span's context, to send on; None when there is none."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get(TRACEPARENT)


def trace_id(traceparent: str | None) -> str | None:
    """The trace id a traceparent names (None for none, or for one that is not W3C)."""
    ctx = trace.get_current_span(_W3C.extract({TRACEPARENT: traceparent or ""}))
    sc = ctx.get_span_context()
    return format(sc.trace_id, "032x") if sc.is_valid else None


def order_attributes(order_id: str | None = None, step: str | None = None,
                     attempt: int | None = None, generation: int | None = None, /,
                     **more: Any) -> dict[str, Any]:
    attrs = {"order.id": order_id, "order.step": step, "order.attempt": attempt,
             "order.generation": generation, **more}
    return {k: v for k, v in attrs.items() if v is not None}


@contextmanager
def span(name: str, *, parent: str | None, kind: SpanKind = SpanKind.CONSUMER,
         links: Sequence[str | None] = (), attributes: Mapping[str, Any] | None = None,
         trouble: bool = False) -> Iterator[Span]:
    """A span whose parent is the sender's context (a traceparent), not whatever ran before on
    this thread: an invocation belongs to its order's trace. With no parent, a new trace.
    ``trouble``: the order is in trouble, so this span and all after it are kept (keep())."""
    if trouble:
        parent = keep(parent)
    parent_ctx = _W3C.extract({TRACEPARENT: parent}) if parent else otel_context.Context()
    span_links = [Link(trace.get_current_span(_W3C.extract({TRACEPARENT: t})).get_span_context())
                  for t in links if t]
    with tracer().start_as_current_span(name, context=parent_ctx, kind=kind, links=span_links,
                                        attributes=dict(attributes or {}),
                                        record_exception=True,
                                        set_status_on_exception=True) as s:
        yield s


def outcome(value: str, error: str | None = None) -> None:
    """How the current span's work ended (an attribute; an error status for errors)."""
    s = trace.get_current_span()
    s.set_attribute("order.outcome", value)
    if error:
        s.set_status(Status(StatusCode.ERROR, error[:300]))


def event(name: str, **attributes: Any) -> None:
    """Something that happened to the order inside the current span (a transition, an alert)."""
    trace.get_current_span().add_event(
        name, {k: v for k, v in attributes.items() if v is not None})


def annotate(**attributes: Any) -> None:
    trace.get_current_span().set_attributes(
        {k: v for k, v in attributes.items() if v is not None})
