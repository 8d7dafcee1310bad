"""What reaches the hosts during the rolling rehearsal (rolling.py): the orders sent through the
local Service Bus stand-in, the simulated services behind a stand-in that refuses some orders'
undo, and an operator resubmitting failed orders through the operator API."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from localrun.bench.pausing import middle_service
from localrun.rolling.hosts import HostProcess
from localrun.rolling.store import Store, is_settled

# The second workflow, named by every DIGITAL_EVERY-th order once every host runs this release.
DIGITAL = "digital-delivery"
DIGITAL_EVERY = 3
# One running order in this many is cancelled by the rehearsal's operator (by its id's digest).
CANCEL_EVERY = 7
# The rehearsal's operator pauses this service for PAUSE_ROUNDS of its rounds, from its
# PAUSE_AT-th, through a host of this release: what the previous release does beside held work.
PAUSED_SERVICE = middle_service()
PAUSE_AT, PAUSE_ROUNDS = 4, 20
# The rehearsal's operator starts one re-drive through a host of this release (the previous
# release has none) at its REDRIVE_AT-th round (between the two rolls in a --quick run), or
# once no host runs the previous release, whichever comes first. Until then it leaves to the
# re-drive one compensated failed order in REDRIVE_EVERY (by its id's digest; those whose
# compensation failed it resubmits with force itself), for the re-drive to resubmit on this
# release's instances only, beside the previous release's; from then on it resubmits any.
REDRIVE_AT, REDRIVE_EVERY = 14, 3
# The share of orders whose undo the services refuse: their compensation fails, an operator
# resubmits them with force.
REFUSE_UNDO_SHARE = 0.5
# Undo operations of the shipped workflows' services.
UNDO_OPERATIONS = frozenset({"release", "refund", "cancel"})
# Where the Agents reach the simulated services: the stand-in's path, not /api/sim, which a
# host of this release points at its own port (localrun.appsettings.follow_port).
PROXY_PATH = "/rolling/sim"


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


def _share(oid: str, every: int) -> int:
    return int(hashlib.sha256(oid.encode()).hexdigest(), 16) % every


def left_to_the_redrive(oid: str) -> bool:
    return _share(oid, REDRIVE_EVERY) == 1


class Resubmitter(threading.Thread):
    """An operator at work during the roll: every failed order whose compensation has settled
    is resubmitted once through the operator API of a host that is up, the hosts taken in
    turn, whichever release each runs (a compensated one as it is, one whose compensation
    failed with force). The previous release checks its master key, this one the development
    principal's roles (OperatorDevelopmentRoles). One running order in CANCEL_EVERY is
    cancelled through a host of this release (the previous one has no cancel): the previous
    release must leave a cancelled order to this one. A service is paused for a while and
    resumed (PAUSED_SERVICE): the previous release must leave its held orders to this one. And
    one re-drive is started (REDRIVE_AT), of the failed orders left to it."""

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
        self.cancels: list[dict[str, Any]] = []
        self._cancel_asked: set[str] = set()
        self.pauses: list[dict[str, Any]] = []  # each pause and resume asked, and its answer
        self.redrive: dict[str, Any] | None = None  # the re-drive's start: its answer
        self._rounds = 0
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
        if len(self.pauses) % 2:  # still paused: resumed, so that what it holds settles
            self._pause_or_resume(resume=True)

    def _current(self) -> list[HostProcess]:
        """The hosts of this release that are up: the operator routes it has and the
        previous release may not."""
        return [h for h in self._hosts() if h.up and h.release.label == "current"]

    def _pause_or_resume(self, resume: bool) -> None:
        current = self._current()
        if not current:
            return  # asked again next round
        path = f"/api/pauses/service/{PAUSED_SERVICE}" + ("/resume" if resume else "")
        status, text = self._post(current[0], path, {"reason": "rolling rehearsal"})
        if status:
            self.pauses.append({"resume": resume, "host": current[0].run, "status": status,
                                "answer": text[:300]})

    def once(self) -> None:
        self._rounds += 1
        if self._rounds >= PAUSE_AT + PAUSE_ROUNDS * (len(self.pauses) > 0) and len(
                self.pauses) < 2:
            self._pause_or_resume(resume=bool(self.pauses))
        if self.redrive is None and (self._rounds >= REDRIVE_AT or all(
                h.release.label == "current" for h in self._hosts())):
            self._start_redrive()
        for oid, s in self._store.states().items():
            if (s.get("ProcessState") in ("Pending", "Processing")
                    and oid not in self._cancel_asked and _share(oid, CANCEL_EVERY) == 0):
                current = self._current()
                if current and not self._halt.is_set():
                    self._cancel_asked.add(oid)
                    self.cancel(current[0], oid)
            if (s.get("ProcessState") != "Error" or not is_settled(s) or oid in self.done
                    or int(s.get("Resubmissions") or 0) > 0 or self.tries[oid] >= 3
                    or (self.redrive is None and left_to_the_redrive(oid)
                        and s.get("Compensation") == "Done")):
                continue
            up = [h for h in self._hosts() if h.up]
            if not up or self._halt.is_set():
                return
            self._turn += 1
            host = up[self._turn % len(up)]
            self.resubmit(host, oid, forced=s.get("Compensation") == "Failed")

    def _start_redrive(self) -> None:
        current = self._current()
        if not current:
            return  # asked again next round
        status, text = self._post(current[0], "/api/redrives",
                                  {"reason": "rolling rehearsal", "dry_run": False})
        if status:
            self.redrive = {"host": current[0].run, "status": status, "answer": text[:2000]}

    def redrive_ended(self, timeout: float) -> dict[str, Any] | None:
        """The re-drive as a host of this release shows it once it is done (or as it stood at
        the timeout); None if it was never started or no such host answers."""
        if self.redrive is None or self.redrive["status"] != 202:
            return None
        rid = json.loads(self.redrive["answer"])["Id"]
        deadline, view = time.monotonic() + timeout, None
        while True:
            current = self._current()
            if current:
                conn = http.client.HTTPConnection("127.0.0.1", current[0].port, timeout=30)
                try:
                    conn.request("GET", f"/api/redrives/{rid}")
                    r = conn.getresponse()
                    if r.status == 200:
                        view = json.loads(r.read())
                except OSError:
                    pass
                finally:
                    conn.close()
            if (view is not None and view["State"] == "done") or time.monotonic() > deadline:
                return view
            time.sleep(1.0)

    def cancel(self, host: HostProcess, oid: str) -> None:
        status, text = self._post(host, f"/api/orders/{oid}/cancel",
                                  {"reason": "rolling rehearsal"})
        if status:
            self.cancels.append({"order": oid, "host": host.run, "status": status,
                                 "answer": text[:300]})

    def _post(self, host: HostProcess, path: str, body: dict[str, Any]) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", host.port, timeout=30)
        try:
            conn.request("POST", path, json.dumps(body).encode(),
                         {"Content-Type": "application/json", "x-functions-key": self._key})
            r = conn.getresponse()
            return r.status, r.read().decode(errors="replace")
        except OSError:
            return 0, ""  # the host went down meanwhile
        finally:
            conn.close()

    def resubmit(self, host: HostProcess, oid: str, forced: bool) -> None:
        status, text = self._post(host, f"/api/orders/{oid}/resubmit",
                                  {"reason": "rolling rehearsal", "force": forced})
        if not status:
            return  # another host takes it next round
        self.tries[oid] += 1
        if status == 202:
            self.done.add(oid)
        self.answers.append({"order": oid, "host": host.run,
                             "release": "current" if host.release.label == "current"
                             else "previous", "forced": forced, "status": status,
                             "answer": text[:300]})
