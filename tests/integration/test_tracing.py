"""One trace per order: every hop of an order, through the local host and Azurite, lands in the
trace its sender started, and so do a retried step and the Supervisor's recovery."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from azure.storage.queue import QueueServiceClient
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from localrun.servicebus import LocalServiceBusChannel
from shared import tracing
from shared.settings import DEFAULT_SAMPLE_RATIO
from tests.conftest import ROOT, wait_until
from tests.integration.conftest import Pipeline, RunningHost
from tests.integration.helpers import drain_json, order
from tests.integration.test_scheduler import accept
from tests.integration.test_supervisor import claimed_and_lost


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    yield exporter
    tracing.use_provider(None)
    provider.shutdown()


def trace_of(s: ReadableSpan) -> str:
    return format(s.context.trace_id, "032x")


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_a_3_step_order_is_one_trace_from_the_sender_to_processed(
        run_host: Any, exported: InMemorySpanExporter) -> None:
    from tests.workflow import REGISTRY as TEST_FLOW

    h: RunningHost = run_host(workflows=TEST_FLOW)
    with tracing.span("shop checkout", parent=None, kind=SpanKind.PRODUCER):
        sender = tracing.current_traceparent()
    assert sender is not None
    root = tracing.trace_id(sender)
    channel = LocalServiceBusChannel(
        QueueServiceClient.from_connection_string(h.env["AzureWebJobsStorage"]),
        h.env["OrdersQueueName"])
    channel.send(json.dumps(order("t-1")), message_id="t-1",
                 application_properties={"traceparent": sender})

    def done() -> bool:
        return any(s.attributes.get("order.state") == "Processed"
                   for s in by_name(list(exported.get_finished_spans()), "scheduler reply"))

    wait_until(done, timeout=60, message="the order's last reply span")
    spans = list(exported.get_finished_spans())
    mine = [s for s in spans if trace_of(s) == root]
    names = sorted({s.name for s in mine})
    for expected in ("intake", "scheduler start", "scheduler reply", "agent alpha", "agent beta",
                     "agent gamma", "alpha hold", "beta take", "gamma send", "service alpha hold",
                     "service beta take", "service gamma send"):
        assert expected in names, (expected, names)
    # Nothing of this order outside its trace.
    assert all(trace_of(s) == root for s in spans if s.attributes.get("order.id") == "t-1")
    # The remote service received the context: its span is the call attempt's child.
    calls = {s.context.span_id: s for s in mine if s.kind is SpanKind.CLIENT}
    for served in (s for s in mine if s.name.startswith("service ")):
        assert served.parent is not None and served.parent.span_id in calls
    # Attributes an operator filters on.
    (intake,) = by_name(mine, "intake")
    assert intake.attributes["order.id"] == "t-1"
    assert intake.attributes["order.outcome"] == "accepted"
    take = by_name(mine, "agent beta")[0]
    assert (take.attributes["order.step"], take.attributes["order.attempt"],
            take.attributes["order.outcome"]) == ("take", 1, "ok")
    assert by_name(mine, "scheduler start")[0].attributes["order.generation"] == 0
    # State transitions are events of the span that made them.
    moves = [e.attributes for s in sorted(mine, key=lambda s: s.start_time) for e in s.events
             if e.name == "order.transition"]
    assert moves[0]["state"] == "Pending" and moves[-1]["state"] == "Processed"
    assert {m.get("step") for m in moves} >= {"hold", "take", "send"}


def test_a_retried_step_and_the_supervisors_recovery_stay_in_the_orders_trace(
        pipeline: Pipeline, exported: InMemorySpanExporter) -> None:
    c = pipeline.container
    claimed_and_lost(pipeline, "t-2")
    state = c.store.get_state("t-2")
    assert state is not None and state.trace is not None
    root = tracing.trace_id(state.trace)
    pipeline.clock.advance(seconds=31)
    assert c.supervisor.tick().retried == 1
    spans = list(exported.get_finished_spans())
    (recovery,) = by_name(spans, "supervisor retry")
    assert trace_of(recovery) == root
    assert recovery.attributes["order.step"] == "hold"
    (tick,) = [s for s in by_name(spans, "supervisor tick") if s.attributes.get(
        "supervisor.retried") == 1]
    assert [link.context.span_id for link in recovery.links] == [tick.context.span_id]
    # The retry goes round again under the same trace: the command, then the new request.
    pipeline.clock.advance(seconds=5)
    from tests.integration.test_scheduler import drain_json_eventually

    (cmd,) = drain_json_eventually(pipeline, "SchedulerQueueName", timeout=8)
    assert tracing.trace_id(cmd["traceparent"]) == root
    c.scheduler.handle_command(json.dumps(cmd))
    (request,) = drain_json(pipeline.env["AlphaRequestsQueueName"])
    assert request["attempt"] == 2 and tracing.trace_id(request["traceparent"]) == root


def test_an_order_sent_without_a_context_gets_a_trace_of_its_own(
        pipeline: Pipeline, exported: InMemorySpanExporter) -> None:
    cmd = json.loads(accept(pipeline, "t-3"))
    (intake,) = by_name(list(exported.get_finished_spans()), "intake")
    assert intake.parent is None
    assert tracing.trace_id(cmd["traceparent"]) == trace_of(intake)


def test_with_nothing_configured_nothing_is_recorded_and_contexts_pass_through(
        pipeline: Pipeline) -> None:
    assert tracing.configure({}) is None
    with tracing.span("anything", parent=None) as s:
        assert not s.is_recording()
    sender = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    from tests.integration.helpers import function, sb_message

    function("intake")(msg=sb_message(order("t-4"), message_id="t-4",
                                      application_properties={"traceparent": sender}))
    (request,) = drain_json(pipeline.env["AlphaRequestsQueueName"])
    # Not traced here, yet the sender's trace goes on with the order.
    assert tracing.trace_id(request["traceparent"]) == "0af7651916cd43dd8448eb211c80319c"


def test_a_provider_the_worker_set_up_is_used_not_set_up_again() -> None:
    """In Azure the worker sets the distro up before it imports the app. A second set-up by the
    app would add a second exporter and log handler: every span and record sent twice."""
    script = """
import logging, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
worker = TracerProvider()
trace.set_tracer_provider(worker)
handlers = list(logging.getLogger().handlers)
from shared import sampling, tracing
got = tracing.configure({"APPLICATIONINSIGHTS_CONNECTION_STRING":
                         "InstrumentationKey=00000000-0000-0000-0000-000000000000;"
                         "IngestionEndpoint=http://127.0.0.1:9/"}, sample_ratio=1.0)
assert got is worker, got
assert logging.getLogger().handlers == handlers, logging.getLogger().handlers
assert isinstance(worker.sampler, sampling.OrderSampler), worker.sampler  # the app's, not its
with tracing.span("s", parent=None) as s:
    assert s.is_recording()
"""
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true"},
                       timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(("sampler", "ratio", "expected"), [
    (None, None, f"OrderSampler{{{DEFAULT_SAMPLE_RATIO}}}"),
    ("microsoft.fixed_percentage", "1", "OrderSampler{1.0}"),
])
def test_the_app_samples_by_order_whatever_sampler_the_distro_was_given(
        sampler: str | None, ratio: str | None, expected: str) -> None:
    """The distro's own default is rate-limited (about 5 spans a second, adapting): it dropped
    spans of an order one by one. Set up with a connection string, the distro's provider takes
    the app's OrderSampler, at OrderTraceSampleRatio, as the worker's does (configure())."""
    script = """
import os
from shared import tracing
from shared.settings import load_settings
got = tracing.configure(os.environ, load_settings().trace_sample_ratio)
print(got.sampler.get_description())
"""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OTEL_TRACES_SAMPLER") and k != "OrderTraceSampleRatio"}
    env |= {"AzureWebJobsStorage": "UseDevelopmentStorage=true", "SimulatorsEnabled": "true"}
    if sampler:
        env |= {"OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": "0.25"}
    if ratio:
        env |= {"OrderTraceSampleRatio": ratio}
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                       env={**env, "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
                            "APPLICATIONINSIGHTS_CONNECTION_STRING":
                                "InstrumentationKey=00000000-0000-0000-0000-000000000000;"
                                "IngestionEndpoint=http://127.0.0.1:9/"},
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == expected


def test_a_bad_exporter_setting_is_named() -> None:
    from shared.settings import SettingsError

    with pytest.raises(SettingsError, match="OTEL_TRACES_EXPORTER"):
        tracing.configure({"OTEL_TRACES_EXPORTER": "zipkinn"})


def test_orders_send_starts_each_orders_trace_when_tracing_is_on(
        app_env: Any, exported: InMemorySpanExporter,
        capsys: pytest.CaptureFixture[str]) -> None:
    from orderctl.main import run
    from shared import bootstrap

    env = app_env()
    assert run(["--settings", "/nonexistent", "send", "--local", "--count", "2"]) == 0
    ids = capsys.readouterr().out.split()
    channel = LocalServiceBusChannel(bootstrap.container().queues, env["OrdersQueueName"])
    sent = {m["message_id"]: m["application_properties"]
            for m in map(json.loads, (m.content for m in channel.queue.peek_messages(32)))}
    spans = {s.attributes["order.id"]: trace_of(s)
             for s in by_name(list(exported.get_finished_spans()), "orders send")}
    assert set(sent) == set(ids) == set(spans)
    for oid in ids:
        assert tracing.trace_id(sent[oid]["traceparent"]) == spans[oid]
    assert len(set(spans.values())) == 2  # a trace per order


def test_orders_trace_shows_the_timeline_and_the_trace_id(
        run_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from orderctl.main import run
    from tests.integration.helpers import function, sb_message
    from tests.integration.test_operator_api import failed_and_compensated

    h: RunningHost = run_host(only=set())
    failed_and_compensated(h, "f-1")
    assert run(["--settings", "/nonexistent", "resubmit", "f-1", "--reason", "card replaced"]) == 0
    capsys.readouterr()
    assert run(["--settings", "/nonexistent", "trace", "f-1", "--json"]) == 0
    timeline = json.loads(capsys.readouterr().out)
    whats = [row["what"] for row in timeline["timeline"]]
    assert whats[0] == "received" and whats[-1] == "now Pending"
    assert any(w.startswith("alert OrderFailed at charge_payment") for w in whats)
    assert any("resubmitted: card replaced" in w for w in whats)
    assert any(w.startswith("step charge_payment: not_started") for w in whats), whats
    # The record's own timeline, event by event: each attempt sent, the resubmission's reason.
    assert any(w.startswith("do sent charge_payment attempt 1") for w in whats), whats
    # An order sent with a context: its trace id is there to look up, traced here or not.
    sender = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    function("intake")(msg=sb_message(order("t-5"), message_id="t-5",
                                      application_properties={"traceparent": sender}))
    assert run(["--settings", "/nonexistent", "trace", "t-5"]) == 0
    assert "trace id: 0af7651916cd43dd8448eb211c80319c" in capsys.readouterr().out
    assert run(["--settings", "/nonexistent", "trace", "ghost"]) == 1


def test_the_workbook_and_the_alert_rule_read_only_what_the_app_emits(
        run_host: Any, exported: InMemorySpanExporter, caplog: pytest.LogCaptureFixture) -> None:
    """The workbook's and the operator-alert rule's queries (infra/app/monitoring.bicep,
    alerts.bicep) name customDimensions: span attributes, span event attributes and the alert
    record's dimensions. Each must be one the app emits."""
    import re

    from tests.conftest import ROOT
    from tests.integration.test_operator_api import compensation_failed

    h: RunningHost = run_host(only=set())
    with caplog.at_level("ERROR", logger="order_pipeline.alerts"):
        compensation_failed(h, "wb-1")
    spans = list(exported.get_finished_spans())
    emitted = {k for s in spans for k in (s.attributes or {})}
    emitted |= {k for s in spans for e in s.events for k in (e.attributes or {})}
    emitted |= {k for r in caplog.records for k in ("alert", "order_id", "step", "reason")
                if hasattr(r, k)}
    for name in ("monitoring.bicep", "alerts.bicep"):
        bicep = (ROOT / "infra" / "app" / name).read_text()
        read = set(re.findall(r'customDimensions\["([^"]+)"\]', bicep))
        assert read and read <= emitted, (name, read - emitted)
    # The event it filters on exists too (the "agent <name>" spans: the first test here).
    assert "order.transition" in {e.name for s in spans for e in s.events}
