"""The app's sampler: whole orders, and every order in trouble (docs/tracing.md). A module of its
own because it needs the OpenTelemetry SDK, which shared/tracing.py loads only when it exports
(configure())."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

# The Azure Monitor exporter turns this span attribute into the item's sample rate (a percentage),
# from which Application Insights counts each kept item as 100/rate items.
SAMPLE_RATE_ATTRIBUTE = "_MS.sampleRate"


class OrderSampler(Sampler):
    """Whole orders, and every order in trouble from the moment it is known.

    An order is kept or dropped by its trace id (every span of it decides alike, in whichever
    process), so ``ratio`` of fault-free orders are kept whole. An order in trouble is kept
    from then on: where the app learns of it (an Agent's refusal, the Supervisor's recovery, an
    operator's resubmit) it marks the context it passes on as sampled (``keep``), and a span
    whose parent is sampled is always kept. Its earlier spans are not, if its trace id was not
    chosen: its record's timeline (``orders trace``) has every step. A true tail decision would
    need every span held until the order settles, across processes: the SDK has no such thing.
    """

    def __init__(self, ratio: float) -> None:
        if not 0 <= ratio <= 1:
            raise ValueError(f"a sample ratio is between 0 and 1, not {ratio}")
        self.ratio = ratio
        self._bound = round(ratio * (1 << 64))

    def chosen(self, trace_id: int) -> bool:
        # The trace id's low 64 bits are random (W3C trace context, level 1 and 2).
        return (trace_id & ((1 << 64) - 1)) < self._bound

    def should_sample(self, parent_context: otel_context.Context | None, trace_id: int,
                      name: str, kind: SpanKind | None = None,
                      attributes: Attributes = None, links: Sequence[Link] | None = None,
                      trace_state: TraceState | None = None) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        chosen = self.chosen(trace_id)
        if not (chosen or (parent.is_valid and parent.trace_flags.sampled)):
            return SamplingResult(Decision.DROP, None, parent.trace_state)
        # Kept for trouble, the order is one of all such: counted once, not 1/ratio times.
        rate = 100.0 * self.ratio if chosen else 100.0
        return SamplingResult(Decision.RECORD_AND_SAMPLE,
                              {**(attributes or {}), SAMPLE_RATE_ATTRIBUTE: rate},
                              parent.trace_state)

    def get_description(self) -> str:
        return f"OrderSampler{{{self.ratio}}}"
