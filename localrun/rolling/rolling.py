"""`make rolling`: a rolling deployment, rehearsed on this machine.

Flex Consumption's rolling update runs the previous release beside the new one, on the same
tables and queues, for a while. This check does that under load on one Azurite:

1. the previous release (a commit from the git history, checked out in a temporary worktree)
   runs in two local function hosts, each a process of its own (its own ports and
   ``SchedulerInstanceId``), with the demo's transient faults and refusals, and 2% of calls
   hanging at random, in the simulated remote services;
2. orders go in continuously through the local Service Bus stand-in; once every host runs this
   release, a share of them name the second workflow (digital-delivery), as the upgrade policy
   has it (docs/upgrades.md: an order naming a workflow the previous release lacks is sent only
   once the rollout is over);
3. host 1 is killed (as the platform may) and started again on this checkout; later host 2
   likewise; the orders keep coming throughout;
4. meanwhile an operator resubmits failed orders through the operator API of whichever host is
   up, of either release: a compensated one as it is, one whose compensation failed with force;
   cancels some running orders, pauses a service and resumes it, and starts a re-drive of a
   share of the failed orders, through a host of this release. The last step's service has a
   limit (LIMIT), which only this release's Agents keep.
   For there to be such orders, the simulated services refuse the undo of some orders
   (``refuses_undo``): a stand-in between the Agents and the simulated services
   (``ServiceProxy``) answers it 422;
5. the sending stops, and every order must settle within a bounded wait.

The verdict: every order sent has a state record and is settled (Processed; or Error with its
compensation Done; or compensation Failed with an operator alert naming the step); at the
simulated services no work is done twice (one key applied per step, a processed order's
effects standing once, a compensated order's effects undone); nothing is left overdue in the
due-time index; nothing was rejected, dead-lettered or poisoned; every resubmit was taken
(202) or refused for a reason (409) and a taken one shows in its order's record; the re-drive
ended done, having resubmitted each order it counts once. Non-zero exit if any fails.

    python -m localrun.rolling --previous ce05056 --orders 300

Data and logs in .azurite/rolling (wiped first): each host process's log, stdout and the
messages it was handed (``<host>.messages.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from localrun.rolling.hosts import ROOT, HostProcess, Release, git, has_commit, worktree
from localrun.rolling.store import Store, is_settled
from localrun.rolling.traffic import Resubmitter, Sender, ServiceProxy
from localrun.rolling.verdict import (
    check_redrive,
    check_resubmits_and_workflows,
    judge,
    print_summary,
    supervisor_interval,
)
from shared.settings import limit_setting_names
from shared.workflows import REGISTRY

DATA = ROOT / ".azurite" / "rolling"
# The release this one follows on main (the last that landed): the one a rolling update of
# this one runs beside. Move it on with each release.
DEFAULT_PREVIOUS = "21d9dac"
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


# Hangs drawn at random, 2% of calls (the demo's settings draw none: it names the orders that
# hang): steps in doubt while two releases run side by side, on whichever orders they fall.
RANDOM_HANGS = {"SimHangRate": "0.02"}

# The default workflow's last step's service limited (its settings; the previous release
# ignores them): this release's Agents take their grants while the previous release's call
# beside them.
LIMIT = dict(zip(limit_setting_names(REGISTRY.get().steps[-1].service), ("4", "20"),
                 strict=True))


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
            overrides = {**DEMO_SETTINGS, **RANDOM_HANGS, **(QUICK if quick else {}), **LIMIT}
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
            # The re-drive's resubmits come before the wait for every order to settle.
            redrive = resubmitter.redrive_ended(settle_timeout)
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
            deadline = time.monotonic() + max(30.0, 3 * supervisor_interval(overrides))
            while time.monotonic() < deadline and (
                    time.monotonic() < quiet_until or store.index_entries()):
                time.sleep(0.5)
            stats = {h.run: h.stop() for h in hosts}
            verdict, summary = judge(store, sent, settled_at, sending, send_done, roll,
                                     stats, logs, overrides)
            check_resubmits_and_workflows(store, sender, resubmitter, proxy, verdict, summary)
            check_redrive(store, resubmitter.redrive, redrive, verdict, summary)
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
    print_summary(say, label, summary, verdict)
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

