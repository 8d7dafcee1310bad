"""`orders send --workflow` for a workflow that gives no sample orders: one clear line, exit 2,
nothing sent."""

from __future__ import annotations

from typing import Any

import pytest

from localrun.servicebus import LocalServiceBusChannel
from orderctl import main as cli_main
from orderctl import samples, sending
from shared.domain.workflow import Registry
from shared.workflows import REGISTRY
from tests.workflow import FLOW


def test_send_refuses_a_workflow_without_samples_and_sends_nothing(
        app_env: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    env = app_env()
    both = Registry.of([*REGISTRY.workflows, FLOW], default=REGISTRY.default)
    monkeypatch.setattr(samples, "REGISTRY", both)
    monkeypatch.setattr(sending, "REGISTRY", both)
    code = cli_main.run(["--settings", "/nonexistent/local.settings.json", "send", "--local",
                         "--workflow", REGISTRY.default, "--workflow", FLOW.name])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"--workflow: workflow {FLOW.name} gives no sample orders" in err
    assert "Traceback" not in err and "NoSamples" not in err
    from shared import bootstrap

    channel = LocalServiceBusChannel(bootstrap.container().queues, env["OrdersQueueName"])
    channel.ensure()
    assert not channel.queue.peek_messages(max_messages=1)
