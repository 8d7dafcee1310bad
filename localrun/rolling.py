"""`make rolling`: a rolling deployment, rehearsed on this machine (issue #30).

Flex Consumption's rolling update runs the previous release beside the new one, on the same
tables and queues, for a while. This check does that under load on one Azurite:

1. the previous release (a commit from the git history, checked out in a temporary worktree)
   runs in two local function hosts, each a process of its own (its own ports and
   ``SchedulerInstanceId``), with the demo's faults in the simulated remote services;
2. orders go in continuously through the local Service Bus stand-in; once every host runs this
   release, a share of them name the second workflow (digital-delivery), as the upgrade policy
   has it (docs/upgrades.md: an order naming a workflow the previous release lacks is sent only
   once the rollout is over);
3. host 1 is killed (as the platform may) and started again on this checkout; later host 2
   likewise; the orders keep coming throughout;
4. meanwhile an operator resubmits failed orders through the operator API of whichever host is
   up, of either release: a compensated one as it is, one whose compensation failed with force.
   For there to be such orders, the simulated services refuse the undo of some orders
   (``refuses_undo``): a stand-in between the Agents and the simulated services
   (``ServiceProxy``) answers it 422;
5. the sending stops, and every order must settle within a bounded wait.

The verdict: every order sent has a state record and is settled (Processed; or Error with its
compensation Done; or compensation Failed with an operator alert naming the step); at the
simulated services no work is done twice (one key applied per step, a processed order's
effects standing once, a compensated order's effects undone); nothing is left overdue in the
due-time index; nothing was rejected, dead-lettered or poisoned; every resubmit was taken
(202) or refused for a reason (409) and a taken one shows in its order's record. Non-zero exit
if any fails.

    python -m localrun.rolling --previous 0ccd175 --orders 300

Data and logs in .azurite/rolling (wiped first): each host process's log, stdout and the
messages it was handed (``<host>.messages.jsonl``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from shared.workflows import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".azurite" / "rolling"
# The release before this session's changes (the event timeline, before workflows by registry).
DEFAULT_PREVIOUS = "0ccd175"
# A killed host's messages come back after this (the host's 10 minutes, and the Service Bus
# lock's minute, would outlast the run); renewed while a function runs, as the host does.
LEASE_SECONDS = 15
# Shorter timings for --quick (the e2e test): the demo's fault rates, smaller budgets and hangs.
QUICK = {
    # The default workflow's steps: the orders the previous release runs follow it.
    "StepBudgetSeconds": ",".join(f"{s.name}=5" for s in REGISTRY.get().steps),
    "SimHangSeconds": "6",
    "SupervisorSchedule": "*/2 * * * * *",
    "PendingGraceSeconds": "5",
    "RetryBackoffMaxSeconds": "2",
    # Twice the demo's: enough failed orders in a short run for an operator to resubmit some
    # as they are and some with force (refuses_undo).
    "SimPermanentErrorRate": "0.06",
}
SETTLED_COMPENSATION = ("Done", "Failed")
# The second workflow, named by every DIGITAL_EVERY-th order once every host runs this release.
DIGITAL = "digital-delivery"
DIGITAL_EVERY = 3
# The share of orders whose undo the services refuse: their compensation fails, an operator
# resubmits them with force.
REFUSE_UNDO_SHARE = 0.5
# Undo operations of the shipped workflows' services.
UNDO_OPERATIONS = frozenset({"release", "refund", "cancel"})
# Where the Agents reach the simulated services: the stand-in's path, not /api/sim, which a
# host of this release points at its own port (localrun.appsettings.follow_port).
PROXY_PATH = "/rolling/sim"


def git(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=check, capture_output=True,
                          text=True)


def has_commit(commit: str) -> bool:
    """Whether this clone's history holds the commit (a shallow CI clone may not)."""
    return git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """The release at ``commit``, checked out beside this one; removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="rolling-"))
    tree = tmp / "previous"
    git("worktree", "add", "--detach", str(tree), commit)
    try:
        yield tree
    finally:
        git("worktree", "remove", "--force", str(tree), check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        git("worktree", "prune", check=False)


# -- the hosts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    label: str  # the short commit, or "current"
    root: Path  # its checkout: the host's working directory and import path


class HostProcess:
    """``python -m localrun host`` of one release, in a process (and session) of its own."""

    def __init__(self, name: str, release: Release, env: Mapping[str, str], logs: Path,
                 lease: float, sim_url: str | None = None) -> None:
        """``sim_url``: where its Agents reach the simulated services (by default its own)."""
        from localrun.azurite import free_port

        self.name, self.release = name, release
        self.port = free_port()
        self.run = f"{name}@{release.label}"
        self.log = logs / f"{self.run}.log"
        self.out = logs / f"{self.run}.out"
        sim = sim_url or f"http://127.0.0.1:{self.port}/api/sim"
        # Each by name: an earlier release may not derive them from SimulatorBaseUrl.
        services = {f"{s.capitalize()}ServiceUrl": f"{sim}/{s}" for s in REGISTRY.services}
        host_env = {
            **{k: v for k, v in os.environ.items()
               if not k.startswith(("AzureWebJobs", "PYTHONPATH"))},
            **env, **services, "SimulatorBaseUrl": sim,
            "SchedulerInstanceId": self.run,
            # Its own code only: the release's checkout first on the import path.
            "PYTHONPATH": str(release.root), "LOCALRUN_LOG_LEVEL": "WARNING",
        }
        from localrun.azurite import _die_with_parent

        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "localrun", "host", "--port", str(self.port),
             "--poll-interval", "0.2", "--settings", "/nonexistent",
             "--lease-seconds", str(lease), "--lock-seconds", str(lease),
             "--record-messages", str(logs / f"{self.run}.messages.jsonl")],
            cwd=release.root, env=host_env, stdout=self.out.open("w"),
            stderr=self.log.open("w"), start_new_session=True, preexec_fn=_die_with_parent)
        self.ready_at: float | None = None
        self.stats: dict[str, Any] = {}

    def wait_started(self, timeout: float = 60.0) -> HostProcess:
        deadline = time.monotonic() + timeout
        while '"event": "started"' not in self.out.read_text():
            if self.proc.poll() is not None:
                raise RuntimeError(f"host {self.run} exited with {self.proc.returncode}:\n"
                                   f"{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"host {self.run} did not start in {timeout:.0f}s")
            time.sleep(0.1)
        self.ready_at = time.monotonic()
        return self

    @property
    def up(self) -> bool:
        return self.ready_at is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, whatever it is doing: no clean-up, its leased messages come back later."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> dict[str, Any]:
        """SIGTERM, and what it ran (its "stopped" line)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
        for line in self.out.read_text().splitlines():
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict) and doc.get("event") == "stopped":
                    self.stats = doc
        return self.stats


# -- the orders -----------------------------------------------------------------------------


class Sender(threading.Thread):
    """Sends ``orders`` orders evenly over ``seconds`` through the local Service Bus stand-in;
    once ``digital`` is set, every DIGITAL_EVERY-th names the second workflow."""

    def __init__(self, connection: str, orders_queue: str, orders: int, seconds: float,
                 seed: int) -> None:
        super().__init__(daemon=True, name="rolling-sender")
        from azure.storage.queue import QueueServiceClient

        from orderctl.samples import sample_orders
        from orderctl.senders import LocalSender

        self._sender = LocalSender(QueueServiceClient.from_connection_string(connection),
                                   orders_queue)
        self._batch = list(sample_orders(orders, prefix="roll", seed=seed))
        self._interval = seconds / max(orders, 1)
        self.sent: list[str] = []
        self.digital = threading.Event()
        self.sent_digital: list[str] = []
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        try:
            for i, o in enumerate(self._batch):
                if self._halt.wait(max(0.0, start + i * self._interval - time.monotonic())):
                    break
                if self.digital.is_set() and i % DIGITAL_EVERY == 0:
                    o = {**o, "workflow": DIGITAL}  # the same message model, another workflow
                    self.sent_digital.append(o["order_id"])
                self._sender.send([(o["order_id"], json.dumps(o).encode())])
                self.sent.append(o["order_id"])
        except BaseException as e:  # reported by the run, which then fails
            self.error = e
        finally:
            self.done.set()

    def stop(self) -> None:
        self._halt.set()


def refuses_undo(order_id: str) -> bool:
    """Whether the services refuse this order's undo (deterministic per order)."""
    digest = hashlib.sha256(f"refuse-undo:{order_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < REFUSE_UNDO_SHARE


class ServiceProxy:
    """The simulated services as the Agents of every host reach them: each call goes to the
    simulated services of a host that is up (their ledger is one table, so any host's answer
    is the services'), this release's first (its services are a superset: the second
    workflow's email). The undo of an order ``refuses_undo`` names is answered 422, as a
    service that will not refund: that order's compensation fails."""

    def __init__(self, hosts: Callable[[], list[HostProcess]]) -> None:
        from localrun.azurite import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}{PROXY_PATH}"
        self.undo_refused: Counter[str] = Counter()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the http.server hook's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, answer = proxy.forward(self.path, dict(self.headers.items()), body,
                                               hosts())
                # The Agent may have given up (a hang): its answer goes nowhere.
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # one line per call would drown the run's output

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name="rolling-services").start()

    def forward(self, path: str, headers: Mapping[str, str], body: bytes,
                hosts: list[HostProcess]) -> tuple[int, bytes]:
        operation = path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        with contextlib.suppress(ValueError, AttributeError):
            order_id = str(json.loads(body).get("order_id", ""))
            if operation in UNDO_OPERATIONS and refuses_undo(order_id):
                self.undo_refused[operation] += 1
                return 422, json.dumps({"error": f"simulated: {operation} refused"}).encode()
        target = "/api/sim" + path.removeprefix(PROXY_PATH)
        keep = {k: v for k, v in headers.items()
                if k.lower() not in ("host", "content-length", "connection")}
        for h in sorted((h for h in hosts if h.up), key=lambda h: h.release.label != "current"):
            conn = http.client.HTTPConnection("127.0.0.1", h.port, timeout=120)
            try:
                conn.request("POST", target, body, keep)
                r = conn.getresponse()
                return r.status, r.read()
            except OSError:
                continue  # killed meanwhile: another host's services answer
            finally:
                conn.close()
        return 503, b'{"error": "no host up to serve the simulated services"}'

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Resubmitter(threading.Thread):
    """An operator at work during the roll: every failed order whose compensation has settled
    is resubmitted once through the operator API of a host that is up, the hosts taken in
    turn, whichever release each runs (a compensated one as it is, one whose compensation
    failed with force). The previous release checks its master key, this one the development
    principal's roles (OperatorDevelopmentRoles)."""

    def __init__(self, store: Store, hosts: Callable[[], list[HostProcess]], master_key: str,
                 interval: float = 1.0) -> None:
        super().__init__(daemon=True, name="rolling-resubmitter")
        self._store, self._hosts, self._key = store, hosts, master_key
        self._interval = interval
        self._halt = threading.Event()
        self._turn = 0
        self.done: set[str] = set()
        self.tries: Counter[str] = Counter()
        self.answers: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._halt.wait(self._interval):
                self.once()
        except BaseException as e:  # reported by the run, which then fails
            self.error = e

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)

    def once(self) -> None:
        for oid, s in self._store.states().items():
            if (s.get("ProcessState") != "Error" or not is_settled(s) or oid in self.done
                    or int(s.get("Resubmissions") or 0) > 0 or self.tries[oid] >= 3):
                continue
            up = [h for h in self._hosts() if h.up]
            if not up or self._halt.is_set():
                return
            self._turn += 1
            host = up[self._turn % len(up)]
            self.resubmit(host, oid, forced=s.get("Compensation") == "Failed")

    def resubmit(self, host: HostProcess, oid: str, forced: bool) -> None:
        body = json.dumps({"reason": "rolling rehearsal", "force": forced}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", host.port, timeout=30)
        try:
            conn.request("POST", f"/api/orders/{oid}/resubmit", body,
                         {"Content-Type": "application/json", "x-functions-key": self._key})
            r = conn.getresponse()
            status, text = r.status, r.read().decode(errors="replace")
        except OSError:
            return  # the host went down meanwhile: another takes it next round
        finally:
            conn.close()
        self.tries[oid] += 1
        if status == 202:
            self.done.add(oid)
        self.answers.append({"order": oid, "host": host.run,
                             "release": "current" if host.release.label == "current"
                             else "previous", "forced": forced, "status": status,
                             "answer": text[:300]})


def is_settled(s: Mapping[str, Any]) -> bool:
    return s.get("ProcessState") == "Processed" or (
        s.get("ProcessState") == "Error" and s.get("Compensation") in SETTLED_COMPENSATION)


# -- the verdict ----------------------------------------------------------------------------


@dataclass
class Verdict:
    problems: dict[str, list[str]] = field(default_factory=dict)

    def fail(self, check: str, detail: str) -> None:
        self.problems.setdefault(check, []).append(detail)

    @property
    def ok(self) -> bool:
        return not self.problems


def _steps(s: Mapping[str, Any]) -> list[dict[str, Any]]:
    try:
        steps = json.loads(s.get("Steps") or "[]")
    except ValueError:
        return []
    return steps if isinstance(steps, list) else []


def brief(s: Mapping[str, Any] | None) -> str:
    """An order's record at a glance: for the report of a failed check."""
    if s is None:
        return "no state record"
    steps = ", ".join(f"{st.get('name')}={st.get('status')}#{st.get('attempt')}"
                      f"{'(in doubt)' if st.get('in_doubt') else ''}" for st in _steps(s))
    fields = {k: s.get(k) for k in ("ProcessState", "Compensation", "CurrentStep",
                                    "FailureCount", "LockedBy", "CompleteBy", "UpdatedAt",
                                    "SchemaVersion", "Workflow", "LastError")}
    return json.dumps({**{k: str(v) if isinstance(v, datetime) else v
                          for k, v in fields.items() if v not in (None, "")},
                       "Steps": steps}, default=str)[:1200]


def audit_ledger(states: Mapping[str, Mapping[str, Any]], effects: Sequence[Mapping[str, Any]],
                 alerts: Sequence[Mapping[str, Any]], verdict: Verdict) -> Counter[str]:
    """The simulated services' ledger (one row per do key: applied, undone or voided) against
    the orders' settled records: no work done twice, a processed order's effects standing
    once, a compensated order's undone. Returns the ledger's rows by status."""
    by_order: dict[str, list[Mapping[str, Any]]] = {}
    for e in effects:
        by_order.setdefault(str(e.get("OrderID", "")), []).append(e)
    unknown = sorted(set(by_order) - set(states))
    for oid in unknown:
        verdict.fail("work for an order nobody sent",
                     f"{oid}: {[e['RowKey'] for e in by_order[oid]]}")
    failed_steps: dict[str, set[str]] = {}
    for a in alerts:
        if a.get("Kind") == "CompensationFailed":
            failed_steps.setdefault(str(a.get("OrderID")), set()).add(str(a.get("Step") or ""))
    order_failed = {str(a.get("OrderID")) for a in alerts if a.get("Kind") == "OrderFailed"}
    for oid, s in states.items():
        if not is_settled(s):
            continue  # reported as unsettled
        rows: dict[str, list[Mapping[str, Any]]] = {}
        for e in by_order.get(oid, []):
            step = str(e["RowKey"]).removeprefix(f"{oid}.").split(".")[0]
            rows.setdefault(step, []).append(e)
        steps = {str(st.get("name")): st for st in _steps(s)}
        for step, rs in rows.items():
            applied = [r["RowKey"] for r in rs if r.get("Status") == "applied"]
            if len(applied) > 1:
                verdict.fail("work done twice", f"{oid} {step}: applied under {applied}; "
                                                f"record {brief(s)}")
            if step not in steps:
                verdict.fail("work for a step the order does not have",
                             f"{oid} {step}: {[r['RowKey'] for r in rs]}")
        if s["ProcessState"] == "Processed":
            for name, st in steps.items():
                applied = [r for r in rows.get(name, []) if r.get("Status") == "applied"]
                key = st.get("work_key")
                if len(applied) != 1:
                    verdict.fail("a processed order's work not standing once",
                                 f"{oid} {name}: ledger "
                                 f"{[(r['RowKey'], r.get('Status')) for r in rows.get(name, [])]}"
                                 f"; record {brief(s)}")
                elif key and applied[0]["RowKey"] != key:
                    verdict.fail("a processed order's work under another key",
                                 f"{oid} {name}: applied {applied[0]['RowKey']}, recorded {key}")
            continue
        if oid not in order_failed:
            verdict.fail("a failed order with no OrderFailed alert", f"{oid}: {brief(s)}")
        alerted = failed_steps.get(oid, set())
        # A compensation stops at the step whose undo failed, with an alert naming it
        # (docs/upgrades.md); the undo goes latest step first, so the work of the steps before
        # the latest one named is left for the operator that alert calls.
        order = list(steps)
        stopped_at = max((order.index(a) for a in alerted if a in order), default=-1)
        for name, rs in rows.items():
            standing = [r["RowKey"] for r in rs if r.get("Status") == "applied"]
            if not standing:
                # Work an earlier generation did and undid (the order since resubmitted) is
                # not this generation's step's.
                key = steps.get(name, {}).get("work_key")
                undone = [r for r in rs if r.get("Status") == "undone"
                          and (not int(s.get("Resubmissions") or 0) or r["RowKey"] == key)]
                if undone and steps.get(name, {}).get("status") != "compensated":
                    verdict.fail("work undone but its step not compensated",
                                 f"{oid} {name}: {brief(s)}")
                continue
            if s.get("Compensation") == "Done":
                verdict.fail("a compensated order's work still standing",
                             f"{oid} {name}: {standing}; record {brief(s)}")
            elif name not in alerted and not (name in order
                                              and order.index(name) < stopped_at):
                verdict.fail("compensation failed with no alert naming the step",
                             f"{oid} {name}: {standing}; alerts name {sorted(alerted)}; "
                             f"record {brief(s)}")
        if s.get("Compensation") == "Failed" and not alerted:
            verdict.fail("compensation failed with no alert naming the step", f"{oid}: {brief(s)}")
    return Counter(str(e.get("Status")) for e in effects)


# -- the run --------------------------------------------------------------------------------


@dataclass
class Store:
    """Unmetered clients on the app's tables and queues, for the watching and the verdict."""

    connection: str
    env: Mapping[str, str]

    def __post_init__(self) -> None:
        from azure.data.tables import TableServiceClient
        from azure.storage.queue import QueueServiceClient

        self.tables = TableServiceClient.from_connection_string(self.connection)
        self.queues = QueueServiceClient.from_connection_string(self.connection)

    def table(self, setting: str) -> list[dict[str, Any]]:
        return [dict(e) for e in
                self.tables.get_table_client(self.env[setting]).list_entities()]

    def states(self) -> dict[str, dict[str, Any]]:
        t = self.tables.get_table_client(self.env["StateTableName"])
        return {e["PartitionKey"]: dict(e) for e in t.query_entities("RowKey eq 'state'")}

    def index_entries(self) -> list[dict[str, Any]]:
        t = self.tables.get_table_client(self.env["InFlightTableName"])
        return [dict(e) for e in t.list_entities()
                if e["PartitionKey"].startswith("due-") or e["PartitionKey"] == "inflight"]

    def messages_in(self, suffix: str) -> dict[str, int]:
        """Messages waiting in each queue whose name ends with ``suffix``."""
        out = {}
        for q in self.queues.list_queues():
            if q.name.endswith(suffix):
                n = self.queues.get_queue_client(q.name).get_queue_properties() \
                    .approximate_message_count
                if n:
                    out[q.name] = n
        return out


def _index_due(entry: Mapping[str, Any]) -> datetime | None:
    row = str(entry.get("RowKey", ""))
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(row.split("|")[0]).astimezone(UTC)
    return None


def run(previous: str, orders: int, phase_seconds: float, settle_timeout: float, data: Path,
        seed: int, quick: bool, lease: float, out: Any = sys.stdout,
        digital_during_roll: bool = False) -> int:
    def say(text: str) -> None:
        print(text, file=out, flush=True)

    if not has_commit(previous):
        say(f"error: this clone has no commit {previous} (a shallow clone? "
            "`git fetch --unshallow`)")
        return 2
    label = git("rev-parse", "--short", f"{previous}^{{commit}}").stdout.strip()
    sys.path.insert(0, str(ROOT))
    from localrun.appsettings import local_app_settings
    from localrun.azurite import Azurite
    from localrun.demo import DEMO_SETTINGS

    shutil.rmtree(data, ignore_errors=True)
    logs = data / "logs"
    logs.mkdir(parents=True)
    hosts: list[HostProcess] = []
    sender: Sender | None = None
    resubmitter: Resubmitter | None = None
    proxy: ServiceProxy | None = None
    t0 = time.monotonic()
    with worktree(previous) as tree:
        old, new = Release(label, tree), Release("current", ROOT)
        say(f"previous release {label} checked out in {tree}; starting Azurite ...")
        az = Azurite.start(location=data / "azurite")
        try:
            overrides = {**DEMO_SETTINGS, **(QUICK if quick else {})}
            env = local_app_settings(az.connection_string, 0, **overrides)
            env = {k: v for k, v in env.items()
                   if not k.endswith("ServiceUrl") and k != "SimulatorBaseUrl"}
            _create_resources(env)
            store = Store(az.connection_string, env)
            proxy = ServiceProxy(lambda: hosts)
            hosts = [HostProcess("host1", old, env, logs, lease, proxy.url),
                     HostProcess("host2", old, env, logs, lease, proxy.url)]
            for h in hosts:
                h.wait_started()
            say(f"two hosts on {label}: " + ", ".join(f"{h.run} :{h.port}" for h in hosts))
            sender = Sender(az.connection_string, env["OrdersQueueName"], orders,
                            3 * phase_seconds, seed)
            resubmitter = Resubmitter(store, lambda: hosts, env["LOCALRUN_MASTER_KEY"])
            if digital_during_roll:  # against the policy: what the previous release does
                sender.digital.set()
            sending = time.monotonic()
            sender.start()
            resubmitter.start()
            roll: list[dict[str, Any]] = []
            for i in range(2):
                _watch_for(phase_seconds * (i + 1) - (time.monotonic() - sending), store,
                           sender, say, sending)
                states = store.states()
                in_flight = sum(not is_settled(states[o]) for o in sender.sent if o in states)
                gone = hosts[i]
                gone.kill()
                at = time.monotonic() - sending
                hosts[i] = HostProcess(gone.name, new, env, logs, lease, proxy.url)
                hosts[i].wait_started()
                roll.append({"host": gone.run, "killed_at": at, "sent_by_then": len(sender.sent),
                             "in_flight": in_flight,
                             "down": hosts[i].ready_at - sending - at})  # type: ignore[operator]
                say(f"rolled {gone.run} (killed at {at:.1f}s, {len(sender.sent)} orders sent, "
                    f"{in_flight} in flight) "
                    f"-> {hosts[i].run} :{hosts[i].port}, up in {roll[-1]['down']:.1f}s")
            # Every host runs this release: orders may name the workflow the previous lacks.
            sender.digital.set()
            while not sender.done.is_set():
                _watch_for(2.0, store, sender, say, sending)
            send_done = time.monotonic()
            resubmitter.stop()  # the roll is over: what is resubmitted from here settles
            if sender.error:
                raise RuntimeError(f"sending failed: {sender.error!r}") from sender.error
            if resubmitter.error:
                raise RuntimeError(f"resubmitting failed: {resubmitter.error!r}") \
                    from resubmitter.error
            sent = list(sender.sent)
            say(f"sent {len(sent)} orders in {send_done - sending:.1f}s; waiting up to "
                f"{settle_timeout:.0f}s for every order to settle ...")
            settled_at = _wait_settled(store, sent, settle_timeout, say, sending)
            # A settled order's last effects (its status, leaving the index) follow the write
            # that settled it; a hung call lands its work late. Wait for both to be over.
            hang = float(overrides.get("SimHangSeconds", "0")) \
                if float(overrides.get("SimHangRate", "0")) else 0.0
            quiet_until = (settled_at or time.monotonic()) + hang + 2
            deadline = time.monotonic() + max(30.0, 3 * _supervisor_interval(overrides))
            while time.monotonic() < deadline and (
                    time.monotonic() < quiet_until or store.index_entries()):
                time.sleep(0.5)
            stats = {h.run: h.stop() for h in hosts}
            verdict, summary = _verdict(store, sent, settled_at, sending, send_done, roll,
                                        stats, logs, overrides)
            _check_resubmits_and_workflows(store, sender, resubmitter, proxy, verdict, summary)
        finally:
            if sender is not None:
                sender.stop()
            if resubmitter is not None:
                resubmitter.stop()
            if proxy is not None:
                proxy.close()
            for h in hosts:
                h.kill()
            az.stop()
    summary["total_seconds"] = round(time.monotonic() - t0, 1)
    _print_summary(say, label, summary, verdict)
    (data / "summary.json").write_text(json.dumps(
        {"summary": summary, "problems": verdict.problems}, indent=2, default=str))
    return 0 if verdict.ok else 1


def _create_resources(env: Mapping[str, str]) -> None:
    """This release's tables and queues (a superset of the previous release's), as the
    deployment's infrastructure would have them, and the Service Bus stand-in."""
    from azure.storage.queue import QueueServiceClient

    from localrun.servicebus import LocalServiceBusChannel
    from shared import bootstrap
    from shared.settings import load_settings
    from shared.workflows import REGISTRY

    bootstrap.configure(REGISTRY)
    container = bootstrap.build(load_settings(dict(env)))
    try:
        container.ensure_resources()
    finally:
        container.close()
    LocalServiceBusChannel(QueueServiceClient.from_connection_string(env["AzureWebJobsStorage"]),
                           env["OrdersQueueName"]).ensure()


def _supervisor_interval(settings: Mapping[str, str]) -> float:
    first = settings.get("SupervisorSchedule", "*/10").split()[0]
    return float(first.removeprefix("*/")) if first.startswith("*/") else 10.0


def _progress(store: Store, sent: list[str], since: float) -> tuple[str, int]:
    states = store.states()
    mine = [states[o] for o in sent if o in states]
    c: Counter[str] = Counter()
    for s in mine:
        label = s.get("ProcessState", "?")
        if label == "Error":
            label += f"/{s.get('Compensation') or 'pending'}"
        c[label] += 1
    settled = sum(is_settled(s) for s in mine)
    text = (f"[{time.monotonic() - since:5.1f}s] {len(sent)} sent, {len(mine)} recorded, "
            f"{settled} settled: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return text, settled


def _watch_for(seconds: float, store: Store, sender: Sender, say: Any, since: float) -> None:
    end = time.monotonic() + max(0.0, seconds)
    while time.monotonic() < end:
        time.sleep(min(3.0, max(0.0, end - time.monotonic())))
        say(_progress(store, list(sender.sent), since)[0])


def _wait_settled(store: Store, sent: list[str], timeout: float, say: Any,
                  since: float) -> float | None:
    """When every order sent was seen settled (``time.monotonic()``), or None at the timeout."""
    deadline = time.monotonic() + timeout
    last = 0.0
    while True:
        text, settled = _progress(store, sent, since)
        if settled == len(sent):
            say(text)
            return time.monotonic()
        if time.monotonic() > deadline:
            say(text)
            return None
        if time.monotonic() - last > 3:
            say(text)
            last = time.monotonic()
        time.sleep(0.5)


def _verdict(store: Store, sent: list[str], settled_at: float | None, sending: float,
             send_done: float, roll: list[dict[str, Any]],
             stats: Mapping[str, dict[str, Any]], logs: Path,
             settings: Mapping[str, str]) -> tuple[Verdict, dict[str, Any]]:
    v = Verdict()
    states = store.states()
    mine = {o: states[o] for o in sent if o in states}
    for oid in sent:
        if oid not in states:
            v.fail("sent, no state record (lost)", oid)
        elif not is_settled(states[oid]):
            v.fail("not settled", f"{oid}: {brief(states[oid])}")
    for oid in sorted(set(states) - set(sent)):
        v.fail("a state record for an order nobody sent", oid)
    rejected = store.table("RejectedOrdersTableName")
    for r in rejected:
        v.fail("rejected at intake", f"{r.get('PartitionKey')}/{r.get('RowKey')}: "
                                     f"{str(r.get('Reason') or r)[:300]}")
    effects = store.table("SimulatorTableName")
    alerts = store.table("OperatorAlertsTableName")
    ledger = audit_ledger(mine, effects, alerts, v)
    # Overdue: an index entry (an order the Supervisor must still look at) past its time by
    # more than a few ticks, once the orders have settled and the app has had its time.
    now = datetime.now(UTC)
    slack = timedelta(seconds=3 * _supervisor_interval(settings))
    index = store.index_entries()
    for e in index:
        due = _index_due(e)
        if e["PartitionKey"] == "inflight" or due is None or due < now - slack:
            oid = str(e.get("OrderID") or e["RowKey"])
            v.fail("left overdue in the due-time index",
                   f"{e['PartitionKey']}/{e['RowKey']}: {brief(states.get(oid))}")
    for name, n in store.messages_in("-poison").items():
        v.fail("messages poisoned", f"{name}: {n}")
    for name, n in store.messages_in("-deadletter").items():
        v.fail("orders dead-lettered", f"{name}: {n}")
    failures: dict[str, dict[str, int]] = {}
    for log in sorted(logs.glob("*.log")):
        found = _failures_in(log)
        if found:
            failures[log.stem] = dict(found)
    processed = [o for o, s in mine.items() if s.get("ProcessState") == "Processed"]
    failed = [s for s in mine.values() if s.get("ProcessState") == "Error"]
    latencies = sorted(
        (s["UpdatedAt"] - s["CreatedAt"]).total_seconds() for s in mine.values()
        if is_settled(s) and isinstance(s.get("UpdatedAt"), datetime)
        and isinstance(s.get("CreatedAt"), datetime))
    summary: dict[str, Any] = {
        "orders_sent": len(sent),
        "recorded": len(mine),
        "settled": sum(is_settled(s) for s in mine.values()),
        "processed": len(processed),
        "failed_compensated": sum(s.get("Compensation") == "Done" for s in failed),
        "failed_compensation_failed": sum(s.get("Compensation") == "Failed" for s in failed),
        "orders_retried": sum(int(s.get("FailureCount") or 0) > 0 for s in mine.values()),
        "retries": sum(int(s.get("FailureCount") or 0) for s in mine.values()),
        "last_written_by": dict(Counter(_last_written_by(s) for s in mine.values())),
        "ledger": dict(ledger),
        "alerts": dict(Counter(str(a.get("Kind")) for a in alerts)),
        "rolls": roll,
        "sending_seconds": round(send_done - sending, 1),
        "settled_after_last_send_seconds":
            round(settled_at - send_done, 1) if settled_at else None,
        "order_seconds_median": _pct(latencies, 0.5),
        "order_seconds_p95": _pct(latencies, 0.95),
        "order_seconds_max": _pct(latencies, 1.0),
        "host_stats": dict(stats),
        "function_failures": failures,
        "index_entries_left": len(index),
        "orders_handled_by": dict(Counter(
            " + ".join(sorted(r)) for r in handled_by(logs, sent).values())),
    }
    return v, summary


def _check_resubmits_and_workflows(store: Store, sender: Sender, resubmitter: Resubmitter,
                                    proxy: ServiceProxy, v: Verdict,
                                    summary: dict[str, Any]) -> None:
    """Every resubmit taken (202) or refused with a reason (409), a taken one in its order's
    record; every order naming the second workflow run by it."""
    states = store.states()
    for a in resubmitter.answers:
        if a["status"] not in (202, 409):
            v.fail("a resubmit answered otherwise than 202 or 409",
                   f"{a['order']} at {a['host']}: {a['status']} {a['answer']}")
        elif a["status"] == 202 and int(states.get(a["order"], {}).get("Resubmissions")
                                        or 0) < 1:
            v.fail("a resubmit taken but not in the order's record",
                   f"{a['order']} at {a['host']}: {brief(states.get(a['order']))}")
    for oid in sender.sent_digital:
        workflow = states.get(oid, {}).get("Workflow")
        if oid in states and workflow != DIGITAL:
            v.fail("an order of the second workflow run by another",
                   f"{oid}: {workflow!r}; {brief(states[oid])}")
    taken = [a for a in resubmitter.answers if a["status"] == 202]
    summary["resubmits"] = dict(Counter(
        f"{a['release']} {'forced' if a['forced'] else 'normal'} {a['status']}"
        for a in resubmitter.answers))
    summary["resubmitted_orders"] = len({a["order"] for a in taken})
    summary["resubmitted_then"] = dict(Counter(
        _outcome(states.get(a["order"], {})) for a in taken))
    summary["digital_sent"] = len(sender.sent_digital)
    summary["digital_outcomes"] = dict(Counter(
        _outcome(states.get(o, {})) for o in sender.sent_digital))
    summary["undo_refused"] = dict(proxy.undo_refused)


def _outcome(s: Mapping[str, Any]) -> str:
    label = str(s.get("ProcessState", "no record"))
    return f"{label}/{s.get('Compensation') or 'pending'}" if label == "Error" else label


def handled_by(logs: Path, orders: list[str]) -> dict[str, set[str]]:
    """Which releases' hosts were handed a message of each order (their message logs)."""
    wanted = set(orders)
    out: dict[str, set[str]] = {o: set() for o in orders}
    for f in logs.glob("*.messages.jsonl"):
        release = f.name.removesuffix(".messages.jsonl").partition("@")[2]
        release = "current" if release == "current" else "previous"
        for line in f.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                oid = json.loads(json.loads(line)["body"]).get("order_id")
                if oid in wanted:
                    out[oid].add(release)
    return out


def _failures_in(log: Path) -> Counter[str]:
    found: Counter[str] = Counter()
    text = log.read_text()
    for m in re.finditer(r"function (\w+) failed\n(?:(?:Traceback| ).*\n)*(\S.*)", text):
        found[f"{m.group(1)}: {m.group(2)[:160]}"] += 1
    for m in re.finditer(r"(\w+): message \S+ moved to (\S+)", text):
        found[f"{m.group(1)}: poisoned into {m.group(2)}"] += 1
    return found


def _last_written_by(s: Mapping[str, Any]) -> str:
    """Which release wrote the record last, read off its shape: this release's records name
    their workflow, the previous release's do not."""
    return "current" if s.get("Workflow") else "previous"


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))], 1)


def _print_summary(say: Any, label: str, s: Mapping[str, Any], verdict: Verdict) -> None:
    say("")
    say(f"rolling deployment {label} -> current: summary")
    for k in ("orders_sent", "recorded", "settled", "processed", "failed_compensated",
              "failed_compensation_failed", "orders_retried", "retries", "last_written_by",
              "ledger", "alerts", "sending_seconds", "settled_after_last_send_seconds",
              "order_seconds_median", "order_seconds_p95", "order_seconds_max",
              "orders_handled_by", "index_entries_left", "resubmits", "resubmitted_orders",
              "resubmitted_then", "digital_sent", "digital_outcomes", "undo_refused",
              "total_seconds"):
        say(f"  {k:34} {s.get(k)}")
    for r in s.get("rolls", []):
        say(f"  killed {r['host']:27} at {r['killed_at']:.1f}s ({r['sent_by_then']} sent, "
            f"{r['in_flight']} in flight), its successor up in {r['down']:.1f}s")
    for run_, st in s.get("host_stats", {}).items():
        inv = st.get("invocations", {})
        say(f"  {run_:34} {sum(inv.values()) if inv else 0} invocations, "
            f"{sum((st.get('failures') or {}).values())} failed, {st.get('poisoned')} poisoned")
    for run_, found in s.get("function_failures", {}).items():
        for what, n in found.items():
            say(f"  failures in {run_}: {n} x {what}")
    if verdict.ok:
        say("PASS: every order settled, nothing lost, no work done twice, none overdue")
        return
    say("FAIL:")
    for check, details in verdict.problems.items():
        say(f"  {check}: {len(details)}")
        for d in details[:5]:
            say(f"    {d}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localrun.rolling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--previous", default=DEFAULT_PREVIOUS,
                   help=f"the release rolled from: a commit in this clone "
                        f"(default {DEFAULT_PREVIOUS})")
    p.add_argument("--orders", type=int, default=300)
    p.add_argument("--phase-seconds", type=float, default=None,
                   help="how long each phase runs (both hosts previous; one rolled; both "
                        "rolled); orders are sent evenly over the three (default: "
                        "orders/15, at least 8)")
    p.add_argument("--settle-timeout", type=float, default=240,
                   help="how long to wait, once the sending stops, for every order to settle")
    p.add_argument("--quick", action="store_true",
                   help="shorter step budgets, hangs and Supervisor interval (the e2e test)")
    p.add_argument("--lease-seconds", type=float, default=LEASE_SECONDS,
                   help="how long a killed host's messages stay invisible")
    p.add_argument("--digital-during-roll", action="store_true",
                   help="send orders of the second workflow from the start, while hosts of "
                        "the previous release run (against the upgrade policy: to see what "
                        "that release does with them)")
    p.add_argument("--seed", type=int, default=30)
    p.add_argument("--data", type=Path, default=DATA,
                   help="Azurite data and the hosts' logs (wiped first)")
    args = p.parse_args(argv)
    phase = args.phase_seconds or max(8.0, args.orders / 15)
    return run(args.previous, args.orders, phase, args.settle_timeout, args.data.resolve(),
               args.seed, args.quick, args.lease_seconds,
               digital_during_roll=args.digital_during_roll)


if __name__ == "__main__":
    raise SystemExit(main())
