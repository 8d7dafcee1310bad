"""End to end: 200+ orders through two local hosts (two Schedulers, two Supervisors) with faults.

Faults: transient errors on a quarter of remote calls, services that hang past the complete-by
(the Agent never replies; the work lands late), permanent refusals, duplicate Service Bus
deliveries, Schedulers that die between claim and dispatch, and hosts killed with SIGKILL at
random moments and started again. Every order must end Processed or Error with its compensation
finished; every remote effect happens once, and every effect of a failed order is undone once.

E2E_ORDERS sets the number of orders (``make soak`` runs 1000).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.data.tables import TableServiceClient
from azure.storage.queue import QueueServiceClient

from localrun.azurite import Azurite, free_port
from localrun.servicebus import LocalServiceBusChannel
from shared import bootstrap
from shared.settings import load_settings
from tests.conftest import ROOT, unique_settings, wait_until
from tests.integration.helpers import order

ORDERS = int(os.environ.get("E2E_ORDERS", "200"))
CRASHED = 5
HUNG = "sim-hang-payment-e2e"  # the payment simulator charges it and loses the answer, once
# A killed host's messages come back after this lease, shorter than the host's 10 minutes (and the
# Service Bus lock's minute) so that the test sees them come back; renewed while a function runs.
LEASE_SECONDS = 20
STEPS = {"reserve_inventory": "inventory", "charge_payment": "payment",
         "arrange_shipping": "shipping"}
FAULTS = {
    "StepBudgetSeconds": "reserve_inventory=8,charge_payment=8,arrange_shipping=8",
    "FailureThreshold": "3",
    "RetryBackoffSeconds": "1",
    "RetryBackoffMaxSeconds": "2",
    "PendingGraceSeconds": "5",
    "SupervisorSchedule": "*/2 * * * * *",
    "SimTransientErrorRate": "0.25",
    "SimPermanentErrorRate": "0.04",
    "SimHangRate": "0.03",
    "SimHangSeconds": "10",
    "CircuitBreakerFailures": "10",
    "CircuitBreakerResetSeconds": "2",
}


class Host:
    def __init__(self, env: dict[str, str], name: str, log_dir: Path) -> None:
        self.env, self.name, self.log_dir = env, name, log_dir
        self.port = free_port()
        self.kills = 0
        self._start()

    def _start(self) -> None:
        urls = {f"{svc.capitalize()}ServiceUrl": f"http://127.0.0.1:{self.port}/api/sim/{svc}"
                for svc in ("inventory", "payment", "shipping")}
        run = f"{self.name}-{self.kills}"
        self.log = self.log_dir / f"{run}.log"
        self.out = self.log_dir / f"{run}.out"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "localrun", "host", "--port", str(self.port),
             "--poll-interval", "0.2", "--settings", "/nonexistent",
             "--lease-seconds", str(LEASE_SECONDS), "--lock-seconds", str(LEASE_SECONDS),
             "--record-messages", str(self.log_dir / f"{run}.messages.jsonl")],
            cwd=ROOT, env={**os.environ, **self.env, **urls, "SchedulerInstanceId": self.name,
                           "LOCALRUN_LOG_LEVEL": "WARNING",
                           # Spans as JSON on stdout: one trace per order, across processes.
                           "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": run,
                           # Every span: the test reads the Supervisor's ticks from them, and a
                           # tick is a trace of its own, kept at the default 1 in 20.
                           "OrderTraceSampleRatio": "1"},
            stdout=self.out.open("w"), stderr=self.log.open("w"))

    def kill_and_restart(self) -> None:
        """SIGKILL: no clean-up, whatever it was doing; then a new process in its place."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.kills += 1
        self._start()

    def stop(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGUSR1)  # its threads' stacks, into its log
                with contextlib.suppress(AssertionError):
                    wait_until(lambda: "most recent call first" in self.log.read_text(),
                               timeout=10, interval=0.1, message="the stacks")
                self.proc.kill()
                self.proc.wait()
        return next((x for x in json_objects(self.out.read_text())
                     if x.get("event") == "stopped"), {})


def json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object in a host's stdout: its event lines and the spans it printed (a killed
    process may have cut its last one short)."""
    decoder = json.JSONDecoder()
    i = text.find("{")
    while i != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("\n{", i + 1)
            i = i + 1 if i != -1 else -1
            continue
        if isinstance(value, dict):
            yield value
        i = text.find("{", end)


class Killer(threading.Thread):
    """Kills one of the hosts at a random moment every few seconds, until told to stop."""

    def __init__(self, hosts: list[Host], rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.hosts, self.rng = hosts, rng
        self.done = threading.Event()
        self.kills = 0

    def run(self) -> None:
        while not self.done.wait(self.rng.uniform(3, 9)):
            self.rng.choice(self.hosts).kill_and_restart()
            self.kills += 1


@pytest.fixture
def env(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    settings = unique_settings(azurite.connection_string, **FAULTS)
    for k, v in settings.items():
        monkeypatch.setenv(k, v)
    bootstrap.reset()
    bootstrap.container().ensure_resources()
    yield settings
    bootstrap.reset()


def traceparent(rng: random.Random) -> str:
    return f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01"


def trace_id_of(tp: str) -> str:
    return tp.split("-")[1]


def crash_between_claim_and_dispatch(env: dict[str, str], order_ids: list[str],
                                     contexts: dict[str, str]) -> None:
    """Take these orders into Processing, then die before sending the step's request."""
    doomed = bootstrap.build(load_settings({**env, "SchedulerInstanceId": "doomed"}))

    class Died(Exception):
        pass

    def die(*a: object, **k: object) -> None:
        raise Died

    doomed.scheduler._relay._sender.send = die  # type: ignore[method-assign]
    # Intake hands each order to the Scheduler in its own invocation: the claim is written,
    # then the process dies sending the request. Its Service Bus message is never delivered
    # again here (as if dead-lettered), so only the Supervisor can finish these orders.
    for oid in order_ids:
        with pytest.raises(Died):
            doomed.intake.handle(oid, json.dumps(order(oid)).encode(),
                                 traceparent=contexts[oid])
    doomed.close()


def settled(tables: TableServiceClient, env: dict[str, str]) -> list[dict[str, Any]]:
    t = tables.get_table_client(env["StateTableName"])
    return [dict(e) for e in t.query_entities("RowKey eq 'state'")]


def failure_counts_past_first_attempt(tables: TableServiceClient, env: dict[str, str],
                                      order_ids: list[str]) -> dict[str, int] | None:
    """Each order's FailureCount once its first step's first attempt is over (the step done, or
    tried again, or the order settled); None while any is still in it."""
    t = tables.get_table_client(env["StateTableName"])
    counts: dict[str, int] = {}
    for oid in order_ids:
        s = t.get_entity(oid, "state")
        first = json.loads(s["Steps"])[0]
        if first["status"] == "running" and first["attempt"] == 1 and not is_settled(s):
            return None
        counts[oid] = s["FailureCount"]
    return counts


def is_settled(s: dict[str, Any]) -> bool:
    return s["ProcessState"] == "Processed" or (
        s["ProcessState"] == "Error" and s.get("Compensation") in ("Done", "Failed"))


def check_messages_against_the_contract(env: dict[str, str], log_dir: Path,
                                        replies: Any) -> None:
    """Every message the hosts were handed, and every status update sent, is a message of its
    channel in schemas/asyncapi.yaml."""
    from tests.contracts import channel_of_queue, problems, recorded

    channels = channel_of_queue(env)
    messages = [(channels[m["queue"]], m["body"])
                for m in recorded(sorted(log_dir.glob("*.messages.jsonl")))]
    while batch := list(replies.receive_messages(max_messages=32)):
        for m in batch:
            messages.append(("statusUpdates", base64.b64decode(m.content).decode()))
            replies.delete_message(m)
    wrong = [(cid, body, p) for cid, body in messages if (p := problems(cid, body))]
    assert not wrong, wrong[:5]
    seen = Counter(cid for cid, _ in messages)
    # These orders follow the default workflow: the other workflows' services see none.
    from shared.workflows import REGISTRY

    idle = {f"{s}Requests" for s in REGISTRY.services} - {
        f"{s}Requests" for s in REGISTRY.get().agents}
    expected = (set(channels.values()) - idle) | {"statusUpdates"}
    assert set(seen) == expected, seen  # none left unchecked


def check_one_trace_per_order(log_dir: Path, contexts: dict[str, str]) -> None:
    """Every span the host processes printed for an order is in the trace its sender started,
    whichever process, kill or recovery it came from."""
    traces: dict[str, set[str]] = {}
    processes: dict[str, set[str]] = {}
    for out in sorted(log_dir.glob("*.out")):
        for span in json_objects(out.read_text()):
            oid = (span.get("attributes") or {}).get("order.id")
            if "context" not in span or not oid:
                continue
            traces.setdefault(oid, set()).add(span["context"]["trace_id"].removeprefix("0x"))
            processes.setdefault(oid, set()).add(out.stem)
    wrong = {oid: t for oid, t in traces.items() if t != {trace_id_of(contexts[oid])}}
    assert not wrong, list(wrong.items())[:5]
    # Spans of nearly every order were printed (a killed host loses its last few seconds')...
    assert len(traces) >= 0.9 * len(contexts), (len(traces), len(contexts))
    # ...and many orders' traces span more than one process.
    assert sum(len(p) > 1 for p in processes.values()) >= 10


@pytest.mark.timeout(900)
def test_orders_with_faults_all_end_in_a_known_state(env: dict[str, str],
                                                     tmp_path: Path) -> None:
    rng = random.Random(7)
    crashed = [f"crash-{i}" for i in range(CRASHED)]
    # Each order is sent with a trace context of its own (a duplicate send with the same one).
    ids = [f"e2e-{i:04d}" for i in range(ORDERS)]
    contexts = {oid: traceparent(rng) for oid in [*crashed, *ids, HUNG]}

    hosts = [Host(env, "sched-A", tmp_path), Host(env, "sched-B", tmp_path)]
    killer = Killer(hosts, rng)
    stats: list[dict[str, Any]] = []
    tables = TableServiceClient.from_connection_string(env["AzureWebJobsStorage"])
    try:
        # Only the Supervisor can finish the crashed orders: it must send the request the dying
        # Scheduler never sent, without counting a failure. They crash once a Supervisor has
        # ticked: the time before any tick is an outage, which would excuse them whatever the
        # rule for a request never sent. And they are watched before any host is killed, since
        # a kill loses in-flight work, which counts.
        wait_until(lambda: any('"name": "supervisor tick"' in h.out.read_text() for h in hosts),
                   timeout=60, message="a first Supervisor tick")
        crash_between_claim_and_dispatch(env, crashed, contexts)
        crashed_counts = wait_until(
            lambda: failure_counts_past_first_attempt(tables, env, crashed), timeout=120,
            interval=0.5, message="the crashed orders past their first attempt")
        qs = QueueServiceClient.from_connection_string(env["AzureWebJobsStorage"])
        channel = LocalServiceBusChannel(qs, env["OrdersQueueName"])
        channel.ensure()
        duplicates = set(rng.sample(ids, 20))
        # Some senders listen for status updates (checked against the contract at the end).
        replies = qs.get_queue_client(env["ReplyQueueAllowList"].rstrip("*") + "-e2e")
        replies.create_queue()
        listening = set(rng.sample(ids, 20))
        killer.start()
        for oid in ids:
            body = json.dumps(order(oid, items=[
                {"sku": f"SKU-{rng.randint(1, 50)}", "quantity": rng.randint(1, 3),
                 "unit_price": "12.50"}], **(
                {"reply_to": replies.queue_name} if oid in listening else {})))
            props = {"traceparent": contexts[oid]}
            channel.send(body, message_id=oid, application_properties=props)
            if oid in duplicates:  # delivered twice, as Service Bus may
                channel.send(body, message_id=oid, application_properties=props)
        expected = set(ids) | set(crashed)
        # Kill for a while under load, then let the survivors finish.
        # (Every order settled, not merely stored: intake alone can outrun the first kill.)
        wait_until(lambda: killer.kills >= 6 or sum(
                       is_settled(s) for s in settled(tables, env)) >= len(expected),
                   timeout=300, interval=1, message="hosts killed under load")
        killer.done.set()
        killer.join()
        # One order whose charge hangs past its budget (the simulator's named fault), sent
        # once no host is being killed: the Supervisor must count the timeout, not excuse it as
        # an outage, and the retry must finish the order with its charge made once.
        channel.send(json.dumps(order(HUNG)), message_id=HUNG,
                     application_properties={"traceparent": contexts[HUNG]})
        expected.add(HUNG)

        def all_settled() -> bool:
            for h in hosts:
                assert h.proc.poll() is None, f"host died: {h.log.read_text()[-3000:]}"
            states = settled(tables, env)
            return len(states) == len(expected) and all(is_settled(s) for s in states)

        try:
            wait_until(all_settled, timeout=900, interval=1, message="every order settled")
        except AssertionError:
            counts = Counter((s["ProcessState"], s.get("Compensation"))
                             for s in settled(tables, env))
            raise AssertionError(f"not all settled: {dict(counts)}") from None
        inflight = tables.get_table_client(env["InFlightTableName"])
        # The due-time index's own partitions (the Supervisor's tick log sits beside them).
        # Entries left by writes that lost a race go when their time comes and a tick meets
        # them: within the longest step budget and the pending grace.
        wait_until(lambda: not list(inflight.query_entities(
                       "PartitionKey ge 'due-' and PartitionKey lt 'due.'")),
                   timeout=120, message="the due-time index to empty")
        # Each host's last process must have run its Supervisor (checked below): one killed and
        # started again near the end may not have ticked yet.
        wait_until(lambda: all('"name": "supervisor tick"' in h.out.read_text() for h in hosts),
                   timeout=60, message="a Supervisor tick in each host's last process")
    finally:
        killer.done.set()
        stats = [h.stop() for h in hosts]

    states = {s["OrderID"]: s for s in settled(tables, env)}
    assert set(states) == expected  # none lost, none invented

    # The brief's five fields, with the brief's values, on every record.
    for s in states.values():
        assert s["ProcessState"] in ("Processed", "Error")
        assert s.get("LockedBy") is None and s.get("CompleteBy") is None
        assert isinstance(s["FailureCount"], int) and s["FailureCount"] >= 0

    effects: dict[tuple[str, str], str] = {}
    for e in tables.get_table_client(env["SimulatorTableName"]).list_entities():
        effects[(e["OrderID"], e["RowKey"].split(".")[1])] = e["Status"]
    processed = [o for o, s in states.items() if s["ProcessState"] == "Processed"]
    failed = [o for o, s in states.items() if s["ProcessState"] == "Error"]
    for oid in processed:
        # Each step's effect exists once (one row per key) and stands.
        assert [effects.get((oid, step)) for step in STEPS] == ["applied"] * 3, oid
    for oid in failed:
        assert states[oid]["Compensation"] == "Done", (oid, states[oid].get("LastError"))
        steps = {st["name"]: st for st in json.loads(states[oid]["Steps"])}
        for step in STEPS:
            # Nothing of a failed order may stand: each effect undone once, or voided.
            assert effects.get((oid, step)) in (None, "undone", "voided"), (oid, step)
            if effects.get((oid, step)) == "undone":
                assert steps[step]["status"] == "compensated", (oid, step, steps[step])
            if steps[step]["status"] == "failed":
                # Refused for good, it did nothing, and no undo of it reached its service.
                assert effects.get((oid, step)) is None, (oid, step, steps[step])
    alerts = {e["OrderID"] for e in tables.get_table_client(
        env["OperatorAlertsTableName"]).list_entities() if e["Kind"] == "OrderFailed"}
    assert alerts == set(failed)

    # The faults really happened and were recovered from.
    assert killer.kills >= 1
    assert len(processed) > ORDERS * 0.7
    assert failed, "the permanent-fault rate should have failed some orders"
    # A dispatch the dying Scheduler never sent is sent again without spending the order's
    # FailureThreshold. A hang of that attempt (SimHangRate) still counts, as it should: for
    # one order in 30 or so, never likely for all five at once.
    assert any(count == 0 for count in crashed_counts.values()), crashed_counts
    # The hung charge timed out and was retried, and the retry found the work done: made once.
    # (Another of its calls can time out at random, SimHangRate; the threshold is 3.)
    assert states[HUNG]["ProcessState"] == "Processed", states[HUNG].get("LastError")
    assert states[HUNG]["FailureCount"] in (1, 2), states[HUNG]["FailureCount"]
    for st in stats:  # the last process of each host, stopped cleanly
        inv = st.get("invocations", {})
        assert inv.get("supervisor", 0) > 0, st
        assert st.get("dead_lettered") == 0, st
    assert len(effects) >= 3 * len(processed)  # each processed order's work, once per step
    check_messages_against_the_contract(env, tmp_path, replies)
    check_one_trace_per_order(tmp_path, contexts)
    print(json.dumps({"orders": len(expected), "processed": len(processed), "failed": len(failed),
                      "host_kills": killer.kills, "failure_counts": Counter(
                          s["FailureCount"] for s in states.values()),
                      "crashed_failure_counts": crashed_counts}))
