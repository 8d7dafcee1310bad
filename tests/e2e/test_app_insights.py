"""With APPLICATIONINSIGHTS_CONNECTION_STRING (as the Bicep sets it), the app sends its traces and
logs to Application Insights: here a stand-in for its ingestion endpoint on loopback, receiving
what the Azure Monitor exporter sends from a local host process. The order's telemetry carries
the order's trace as its operation id, its log record too, each exactly once, and the storage
SDK's own requests are not sent: whether the app sets the exporter up itself or, as in Azure
(PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY), the worker does before it imports the app."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from azure.storage.queue import QueueServiceClient

from localrun.azurite import Azurite, free_port
from localrun.servicebus import LocalServiceBusChannel
from shared import bootstrap
from tests.conftest import ROOT, unique_settings, wait_until
from tests.infra.drift import bicep_names
from tests.integration.helpers import order

SENDER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Ingestion:
    """Accepts what the exporter posts to <IngestionEndpoint>/v2.1/track; keeps the envelopes."""

    def __init__(self) -> None:
        self.envelopes: list[dict[str, Any]] = []
        received = self.envelopes

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self.path.endswith("/track"):  # live metrics: nothing is stored
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                try:
                    parsed = json.loads(raw)
                    items = parsed if isinstance(parsed, list) else [parsed]
                except ValueError:  # newline-delimited envelopes
                    items = [json.loads(line) for line in raw.splitlines() if line.strip()]
                received.extend(items)
                body = json.dumps({"itemsReceived": len(items), "itemsAccepted": len(items),
                                   "errors": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def ingestion() -> Iterator[Ingestion]:
    i = Ingestion()
    yield i
    i.server.shutdown()


def _as_in_azure() -> dict[str, str]:
    settings = bicep_names(ROOT / "infra").app_settings
    return {k: settings[k] for k in ("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY",
                                     "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS",
                                     "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG")}


@pytest.mark.parametrize("set_up_by", ["app", "worker"])
def test_an_orders_telemetry_reaches_application_insights_in_its_trace(
        azurite: Azurite, ingestion: Ingestion, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, set_up_by: str) -> None:
    env = unique_settings(azurite.connection_string, SupervisorSchedule="*/30 * * * * *")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    bootstrap.reset()
    bootstrap.container().ensure_resources()
    port = free_port()
    urls = {f"{svc.capitalize()}ServiceUrl": f"http://127.0.0.1:{port}/api/sim/{svc}"
            for svc in ("inventory", "payment", "shipping")}
    out = (tmp_path / "host.out").open("w")
    host = subprocess.Popen(
        [sys.executable, "-m", "localrun", "host", "--port", str(port), "--poll-interval", "0.2",
         "--settings", "/nonexistent"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        # INFO, as the worker sets the root logger: the app's records go to Application Insights.
        env={**os.environ, **env, **urls, "LOCALRUN_LOG_LEVEL": "INFO",
             "APPLICATIONINSIGHTS_CONNECTION_STRING":
                 "InstrumentationKey=00000000-0000-0000-0000-000000000000;"
                 f"IngestionEndpoint=http://127.0.0.1:{ingestion.port}/;"
                 f"LiveEndpoint=http://127.0.0.1:{ingestion.port}/",
             **(_as_in_azure() if set_up_by == "worker" else {}),
             # Nothing to Microsoft's own endpoints from a test.
             "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
             "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_BLRP_SCHEDULE_DELAY": "200"})
    try:
        channel = LocalServiceBusChannel(
            QueueServiceClient.from_connection_string(env["AzureWebJobsStorage"]),
            env["OrdersQueueName"])
        channel.ensure()
        channel.send(json.dumps(order("ai-1")), message_id="ai-1",
                     application_properties={"traceparent": SENDER})
        trace_id = SENDER.split("-")[1]

        # The whole order, every time (sampling keeps whole traces): intake, the start, three
        # Agents, three simulated services and three replies; the three remote calls; five
        # transitions and one log record.
        whole = (11, 3, 6)

        def counts() -> tuple[int, int, int]:
            kinds = [e["data"]["baseType"] for e in ingestion.envelopes
                     if e.get("tags", {}).get("ai.operation.id") == trace_id]
            return (kinds.count("RequestData"), kinds.count("RemoteDependencyData"),
                    kinds.count("MessageData"))

        # Within seconds. (It once took 30 s to forever in one run of three, and one run in
        # three lost items: the distro's default sampler, rate-limited and adapting, dropped
        # spans one by one; see tracing.TRACES_SAMPLER.)
        wait_until(lambda: all(c >= w for c, w in zip(counts(), whole, strict=True)),
                   timeout=60, interval=0.2, message="the order's telemetry at the endpoint")
    finally:
        # A clean stop flushes what the exporter still holds (the SDK shuts down at exit).
        host.send_signal(signal.SIGTERM)
        host.wait(timeout=60)
        out.close()
        bootstrap.reset()
    mine = [e for e in ingestion.envelopes
            if e.get("tags", {}).get("ai.operation.id") == trace_id]
    # Everything of this order is in its trace: one query (operation_Id) shows the whole order.
    of_order = [e for e in ingestion.envelopes
                if e["data"]["baseData"].get("properties", {}).get("order.id") == "ai-1"]
    assert of_order and all(e in mine for e in of_order)
    # Exactly once: a second set-up (the app's on top of the worker's) would export twice.
    (intake,) = [e for e in mine if e["data"]["baseData"].get("name") == "intake"]
    assert intake["data"]["baseType"] == "RequestData"
    assert counts() == whole  # and each once, after the clean stop's flush
    # The app's log record, correlated to the span that wrote it.
    (log,) = [e for e in mine if "accepted" in e["data"]["baseData"].get("message", "")]
    assert log["data"]["baseType"] == "MessageData"
    # Not the storage SDK's own requests: they are not the order's story (and each is billed).
    assert not [e for e in ingestion.envelopes if e["data"]["baseType"] == "RemoteDependencyData"
                and e["data"]["baseData"].get("type") in ("HTTP", "Microsoft.Storage")]
