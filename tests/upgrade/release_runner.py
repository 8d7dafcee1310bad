"""Runs an earlier release's own code and prints what it left in storage (make_fixtures.py).

Started by make_fixtures.py in a subprocess whose working directory and import path are that
release's ``shared`` package, taken from git (``git archive <commit> shared``). It imports
nothing of this release: every entity and message it prints was written by the release's own
handlers (intake, Scheduler, Agents, Supervisor, operator) against Azurite, driven step by step
by a script, with a clock the script moves and remote services it plays itself.

argv[1]: JSON ``{"env": app settings, "order": order message, "script": [[op, ...], ...],
"roles": {role: queue name}, "tables": {role: table name}}``. Prints JSON: the tables' entities
(Table Storage's JSON, ``@odata.type`` for times), the messages left on each queue, the effects
the services hold, and the clock.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class Services:
    """The remote services as the release's Agents met them: effects by key, a plan of
    refusals. ``applied`` / ``undone`` / ``voided`` as the simulated services answer."""

    def __init__(self, errors: Any) -> None:
        self.errors = errors  # the release's shared.adapters.remote_service
        self.status: dict[str, str] = {}  # "<service>/<do-key>" -> status
        self.owner: dict[str, list[str]] = {}  # -> [order, step]
        self.plan: dict[str, list[str]] = {}  # "<service>/<operation>" -> outcomes to come

    def client(self, service: str) -> Any:
        services = self

        class Client:
            def call(self, *args: Any) -> dict[str, Any]:
                # (operation, key, body, timeout) before Call; (call, timeout) from it (the
                # service's client handed one Call, which holds the rest).
                if len(args) == 2:
                    c, _ = args
                    operation, key, body = c.operation, c.key, c.http_body()
                else:
                    operation, key, body, _ = args
                planned = services.plan.get(f"{service}/{operation}") or ["ok"]
                outcome = planned.pop(0) if len(planned) > 1 else planned[0]
                if outcome == "refuse":
                    raise services.errors.PermanentServiceError(f"HTTP 422 {operation} refused")
                target = body.get("compensates")
                effect = f"{service}/{target or key}"
                current = services.status.get(effect)
                services.owner.setdefault(effect, [body["order_id"], body["step"]])
                if target:
                    services.status[effect] = "undone" if current == "applied" else (
                        current or "voided")
                elif current is None:
                    services.status[effect] = "applied"
                elif current != "applied":
                    raise services.errors.PermanentServiceError(f"HTTP 409 {key} was {current}")
                if outcome == "lost":  # done, but the answer never came back
                    raise services.errors.TransientServiceError("read timeout")
                return {"status": services.status[effect], "key": target or key}

        return Client()


def odata(entity: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in entity.items():
        if isinstance(v, datetime):
            out[k] = v.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            out[f"{k}@odata.type"] = "Edm.DateTime"
        elif hasattr(v, "value") and hasattr(v, "edm_type"):  # EntityProperty (Int64)
            out[k] = str(v.value)
            out[f"{k}@odata.type"] = "Edm.Int64"
        else:
            out[k] = v
    return out


def _stub_pybreaker() -> None:
    """The first releases' Agents used pybreaker (d227dda to dff45f2), which this release no
    longer installs. The breaker shapes nothing stored or sent, and the runner never lets a
    service fail often enough to open one: a pass-through stands in for it."""
    import types

    if "pybreaker" in sys.modules:
        return
    try:
        import pybreaker  # noqa: F401
    except ImportError:
        stub = types.ModuleType("pybreaker")

        class CircuitBreakerError(Exception):
            pass

        class CircuitBreaker:
            def __init__(self, **_: Any) -> None:
                pass

            def call(self, f: Any, *args: Any, **kwargs: Any) -> Any:
                return f(*args, **kwargs)

        stub.CircuitBreaker = CircuitBreaker  # type: ignore[attr-defined]
        stub.CircuitBreakerError = CircuitBreakerError  # type: ignore[attr-defined]
        sys.modules["pybreaker"] = stub


def main() -> None:
    spec = json.loads(sys.argv[1])
    _stub_pybreaker()
    from azure.core.exceptions import ResourceNotFoundError
    from azure.storage.queue import QueueServiceClient

    from shared import bootstrap
    from shared.adapters import remote_service
    from shared.settings import load_settings

    if hasattr(bootstrap, "configure"):  # releases with a registry of workflows
        from shared.workflows import REGISTRY  # type: ignore[import-not-found]

        bootstrap.configure(REGISTRY)
    with contextlib.suppress(ImportError):  # releases that trace (d46d888 on): a real
        from opentelemetry.sdk.trace import TracerProvider  # provider, so that messages and

        from shared import tracing  # type: ignore[attr-defined]  # records carry a context

        tracing.use_provider(TracerProvider())
    clock = Clock()
    c = bootstrap.build(load_settings(spec["env"]), clock=clock)
    c.ensure_resources()
    c.supervisor.tick()  # it has been ticking all along (no outage before the order)
    services = Services(remote_service)
    for name, agent in c.agents.items():
        agent._client = services.client(name)
        agent._sleep = lambda s: setattr(clock, "now", clock.now + timedelta(seconds=s))
    queues = QueueServiceClient.from_connection_string(spec["env"]["AzureWebJobsStorage"])
    roles: dict[str, str] = spec["roles"]
    oid = spec["order"]["order_id"]
    saved: dict[str, Any] = {}

    def take(role: str, wait: float = 5.0) -> str:
        q = queues.get_queue_client(roles[role])
        deadline = time.monotonic() + wait
        while True:
            for m in q.receive_messages(max_messages=1, visibility_timeout=30):
                q.delete_message(m)
                return base64.b64decode(m.content).decode()
            if time.monotonic() > deadline:
                raise SystemExit(f"nothing on {role} ({roles[role]})")
            time.sleep(0.1)

    def send(role: str, body: str) -> None:
        queues.get_queue_client(roles[role]).send_message(base64.b64encode(body.encode())
                                                         .decode())

    def run(*step: Any) -> None:
        op, *args = step
        if op == "intake":
            c.intake.handle(f"m-{oid}", json.dumps(spec["order"]).encode())
        elif op == "intake-body":  # ["intake-body", message id, body]: any message, as sent
            c.intake.handle(args[0], args[1].encode())
        elif op == "command":
            c.scheduler.handle_command(take("scheduler"))
        elif op == "reply":
            c.scheduler.handle_reply(take("responses"))
        elif op == "agent":  # ["agent", service, outcome, ...]: the plan for its next calls
            service, *plan = args
            for operation in _operations(c, service):
                services.plan[f"{service}/{operation}"] = list(plan or ["ok"])
            reply = c.agents[service].handle(take(service))
            if reply is not None and not hasattr(c.agents[service], "_responses_queue"):
                send("responses", reply.to_json())  # the output binding, after the return
        elif op == "drop":
            take(args[0])
        elif op == "advance":
            clock.now += timedelta(seconds=args[0])
        elif op == "tick":
            clock.now += timedelta(seconds=args[0])
            c.supervisor.tick()
        elif op == "resubmit":
            c.operator.resubmit(oid, "cause fixed")
        elif op == "break":  # the queue is gone: the next send to it fails, after the write
            queues.delete_queue(roles[args[0]])
        elif op == "mend":
            with contextlib.suppress(Exception):
                queues.create_queue(roles[args[0]])
        elif op == "fails":  # a step the release was expected to fail half-way
            with contextlib.suppress(Exception):
                run(*args)
        elif op == "corrupt":
            states = c.tables.get_table_client(spec["tables"]["OrderState"])
            saved["state"] = dict(states.get_entity(oid, "state"))
            states.upsert_entity({**saved["state"], "ProcessState": "Exploded"})
        elif op == "repair":
            states = c.tables.get_table_client(spec["tables"]["OrderState"])
            states.upsert_entity(saved["state"])
        else:
            raise SystemExit(f"unknown step {op}")

    for step in spec["script"]:
        run(*step)

    tables = {}
    for role, name in spec["tables"].items():
        t = c.tables.get_table_client(name)
        tables[role] = [odata(e) for e in t.list_entities()]
    time.sleep(spec.get("settle_seconds", 0))  # delayed messages (a backoff) become visible
    left = {}
    for role, name in roles.items():
        q = queues.get_queue_client(name)
        bodies = []
        # A queue of a service the release does not have (email before 14ccb65) was never made.
        with contextlib.suppress(ResourceNotFoundError):
            for m in q.peek_messages(max_messages=32):
                bodies.append(json.loads(base64.b64decode(m.content).decode()))
        left[role] = bodies
    print(json.dumps({"now": odata({"t": clock.now})["t"], "tables": tables, "queues": left,
                      "services": [{"effect": k, "status": v, "order": services.owner[k][0],
                                    "step": services.owner[k][1]}
                                   for k, v in services.status.items()]}))


def _operations(c: Any, service: str) -> list[str]:
    # Every workflow's steps where the release has a registry of them (14ccb65 on: two).
    workflows = c.workflows.workflows if hasattr(c, "workflows") else [c.workflow]
    steps = [s for w in workflows for s in w.steps
             if getattr(s, "agent", None) == service or getattr(s, "service", None) == service]
    return [op for s in steps for op in (s.operation, s.compensation) if op]


if __name__ == "__main__":
    main()
