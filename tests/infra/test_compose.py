"""The local emulators (docker-compose.yml) are reachable from this machine only."""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import ROOT


def _published(service: dict[str, Any]) -> list[str]:
    """Each published port as compose's short form, or its long form written as one."""
    out = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            out.append(f"{port.get('host_ip', '')}:{port.get('published', '')}:{port['target']}")
        else:
            out.append(str(port))
    return out


def test_every_published_port_binds_loopback_only() -> None:
    """Issue 32: the emulators take the well-known development keys, so a port published on
    every interface (compose's default, "10001:10001") hands the queues and tables to anyone on
    the network."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    ports = {name: _published(svc) for name, svc in compose["services"].items()}
    assert ports["azurite"] and ports["servicebus"]  # the test reads the file's shape
    for name, published in ports.items():
        for port in published:
            assert port.startswith("127.0.0.1:") and port.count(":") == 2, (name, port)
    # nothing the emulators need is left out: the hosts' and the CLI's ports
    assert {p.split(":")[1] for p in ports["azurite"]} == {"10000", "10001", "10002"}
    assert {p.split(":")[1] for p in ports["servicebus"]} == {"5672", "5300"}
    # SQL Server is the emulator's store: published nowhere
    assert not ports["mssql"]
