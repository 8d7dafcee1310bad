"""The product's promise, searched for counter-examples rather than shown by examples.

A hypothesis state machine drives the real handlers (intake, Scheduler, Agents, Supervisor,
operator resubmit and cancel) over the in-memory adapters, with the things that happen in
production as rules: deliveries and duplicate deliveries, messages handled in any order, Agent
calls that succeed, are refused, fail transiently or succeed with the reply lost, Supervisor
ticks at any time, the process dying at any point between a write and its effects, the store
failing, operator resubmits (forced or not) and cancels, an operator pausing and resuming a
service or the workflow's intake while the pipeline runs on, and steps that declare their own
failure policy: their own attempts, and an answer that needs a person, which parks the order
until an operator resumes it. A model of the remote services
records every effect. The world also holds what earlier releases left behind and what no
release should have: unreadable state records crowding the orders' own index partitions, index
entries of the shapes written before the due-time index, and undo requests of the shape sent
before work keys.

After every step: no business effect stands twice, no readable order stays overdue for more
than a bounded number of completed Supervisor ticks, however many unreadable records there are,
no Agent calls a paused service, no order of a paused workflow begins, and no failure is counted
for an attempt that met a pause of its service.
At the end, time runs on without faults, and then: every order is settled, a Processed order's
work stands once per step, a failed and compensated order has nothing left standing, and every
failure reached an operator.

``HYPOTHESIS_PROFILE=soak`` runs many more examples (``make soak``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shared.adapters.pauses import CachedPauses
from shared.adapters.remote_service import PermanentServiceError, TransientServiceError
from shared.adapters.state_store import entry_from_index
from shared.circuit_breaker import CircuitBreaker
from shared.domain import due_index
from shared.domain.alerts import AlertKind
from shared.domain.due_index import IndexKey
from shared.domain.messages import (
    Action,
    AgentReply,
    AgentRequest,
    ReplyOutcome,
    new_work_key,
    undo_key,
)
from shared.domain.pauses import LAG, PauseKind, Target, begun
from shared.domain.services import Call
from shared.domain.state import (
    SCHEMA_VERSION,
    CompensationState,
    ProcessState,
    RetryPolicy,
    due_at,
    exponential_backoff,
)
from shared.domain.step_policy import StepRetry
from shared.domain.transitions import receive
from shared.domain.workflow import Registry
from shared.handlers.agent import Agent, AgentRetryPolicy, RequestCheck
from shared.handlers.health import HealthProbe
from shared.handlers.intake import IntakeHandler
from shared.handlers.operator import Operator
from shared.handlers.operator_requests import (
    CancelRefused,
    RedriveRequest,
    ResubmitRefused,
    ResumeRefused,
)
from shared.handlers.pausing import PauseControl, PauseRefused
from shared.handlers.redrive import RedriveRunner
from shared.handlers.redriving import RedriveControl, RedriveRefused
from shared.handlers.relay import EffectRelay
from shared.handlers.scheduler import Queues, Scheduler
from shared.handlers.supervisor import Supervisor
from shared.workflows.orders.message import parse_order
from tests.conftest import FakeClock
from tests.fakes import (
    Crash,
    FakeAlertStore,
    FakeOrderStore,
    FakePauses,
    FakeQueues,
    FakeRedrives,
    FakeRejections,
    FakeTickLog,
    QueuedMessage,
    StorageDown,
)
from tests.workflow import FLOW

SCHEDULER_Q = "scheduler-commands"
RESPONSES_Q = "agent-responses"
AGENT_QS = {"alpha": "alpha-requests", "beta": "beta-requests", "gamma": "gamma-requests"}
SERVICE_OF_STEP = {s.name: s.service for s in FLOW.steps}
WORK_QUEUES = [SCHEDULER_Q, RESPONSES_Q, *AGENT_QS.values()]
ORDER_IDS = ["o-1", "o-2"]
# Records no code can read, filed in the same index partitions as the orders above (chosen by
# due_index.shard), so that they can sit in front of them.
BAD_IDS = [f"bad-{n}" for n in range(200)
           if due_index.shard(f"bad-{n}") in {due_index.shard(o) for o in ORDER_IDS}][:6]
# Recoveries a tick may carry out: small, so that a tick's budget is something bad records
# could use up.
MAX_RECOVERIES = 2

# What an operator may pause: each service, and the workflow's intake.
TARGETS = [*(Target(PauseKind.SERVICE, s) for s in AGENT_QS),
           Target(PauseKind.WORKFLOW, FLOW.name)]
OUTCOMES = st.sampled_from(["ok", "ok", "ok", "transient", "refuse", "lost", "park"])
FAULTS = st.one_of(st.none(), st.tuples(st.integers(1, 8), st.sampled_from(["crash", "down"])))


class ModelServices:
    """What the remote services did, whatever the app believes, as providers' APIs behave: a
    key's first answer (work done, with the id the provider gave it, or a refusal) is its
    answer for ever; an undo names the id of the work it undoes; nothing keeps tombstones."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], dict[str, Any] | str] = {}  # (service, key) ->
        self.status: dict[str, str] = {}  # work id -> applied / undone
        self.owner: dict[str, tuple[str, str]] = {}  # work id -> (order, step)
        self.log: list[str] = []  # every call that reached a service, for a failure's message

    def do(self, service: str, key: str, order_id: str, step: str,
           refuse: bool) -> dict[str, Any]:
        first = self.answers.get((service, key))
        if first is None and refuse:
            first = self.answers[(service, key)] = f"HTTP 422 {key} refused"
        if first is None:
            work = f"{service}-{len(self.status) + 1}"
            self.status[work] = "applied"
            self.owner[work] = (order_id, step)
            first = self.answers[(service, key)] = {"id": work}
        if isinstance(first, str):
            # A service's error body of any size and content: as stored, each control
            # character takes six units, so refusals test every budget of the record.
            raise PermanentServiceError(first + ": " + "\x01" * 5_000)
        return first

    def undo(self, service: str, key: str, result: Any, refuse: bool) -> dict[str, Any]:
        """An undo is work under its own key too: its first answer is its answer."""
        first = self.answers.get((service, key))
        work = result.get("id") if isinstance(result, dict) else None
        if first is None and (refuse or work not in self.status
                              or not str(work).startswith(f"{service}-")):
            first = self.answers[(service, key)] = (
                f"HTTP 422 {key} refused" if refuse else f"HTTP 404 no work {work!r} to undo")
        if first is None:
            self.status[str(work)] = "undone"
            first = self.answers[(service, key)] = {"undone": work}
        if isinstance(first, str):
            raise PermanentServiceError(first + ": " + "\x01" * 5_000)
        return first

    def answers_of(self) -> set[str]:
        """The keys a first answer was given under (a provider answers a repeat with it)."""
        return {key for _, key in self.answers}

    def standing(self, order_id: str) -> Counter[str]:
        return Counter(step for k, (o, step) in self.owner.items()
                       if o == order_id and self.status[k] == "applied")


class ModelClient:
    """An Agent's remote-service client whose every call's fate the test chooses."""

    def __init__(self, service: str, model: ModelServices, machine: PipelineMachine) -> None:
        self._service = service
        self._model = model
        self._machine = machine

    def call(self, c: Call, timeout: float) -> dict[str, Any]:
        assert not self._machine.held_everywhere(Target(PauseKind.SERVICE, self._service)), (
            f"the {self._service} Agent called its service while it was paused ({c.key})")
        self._machine.dropped.discard(  # called after all
            (c.order_id, c.step, c.attempt, c.complete_by))
        outcome = self._machine.outcome()
        self._model.log.append(f"{self._service} {c.operation} {c.key} {c.result} for "
                               f"{c.order_id}: {outcome}")
        if outcome == "transient":
            raise TransientServiceError("HTTP 503")
        if outcome == "park" and c.action is Action.DO and c.key not in self._model.answers_of():
            # Nothing done: the provider waits for a person (a step that declares 402 parks).
            raise PermanentServiceError(f"HTTP 402 {c.key} needs the customer", 402)
        if c.action is Action.UNDO:
            result = self._model.undo(self._service, c.key, c.result, refuse=outcome == "refuse")
        else:
            result = self._model.do(self._service, c.key, c.order_id, c.step,
                                    refuse=outcome == "refuse")
        if outcome == "lost":
            raise TransientServiceError("read timeout (the work was done)")
        return result


@dataclass
class FaultPlan:
    countdown: int
    kind: str


class PipelineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(datetime(2026, 1, 1, 12, 0, tzinfo=UTC))
        self.plan: FaultPlan | None = None
        self.draw_outcome: Any = None
        self.queues = FakeQueues(self.clock, self.fault)
        self.alerts = FakeAlertStore(self.fault)
        self.model = ModelServices()
        # The first step's budget is shorter than the pending grace: a claim makes the order due
        # earlier than intake filed it, so the search meets the index's re-filing too.
        # "take" declares its own failure policy (StepRetry): its timeouts are counted for it
        # alone, with its own backoff, beside the others' FailureThreshold over the order;
        # "send" parks the order on a 402, for an operator to resume or cancel.
        flow = FLOW.with_budgets({"hold": timedelta(seconds=8)})
        declared = {"take": StepRetry(attempts=4, backoff=(timedelta(seconds=2),
                                                           timedelta(seconds=4))),
                    "send": StepRetry(park={402: "the customer must confirm"})}
        workflow = self.workflow = dataclasses.replace(flow, steps=tuple(
            dataclasses.replace(s, retry=declared[s.name]) if s.name in declared else s
            for s in flow.steps))
        self.policy = RetryPolicy(
            failure_threshold=3,
            backoff=exponential_backoff(timedelta(seconds=5), timedelta(seconds=20)),
            pending_grace=timedelta(seconds=10),
            compensation_threshold=3,
            rescue_threshold=3,
            # Shorter than the shortest outage below, so that every outage is seen.
            outage_gap=timedelta(seconds=15),
            max_recoveries_per_tick=MAX_RECOVERIES,
            # Within the time the search runs on: an entry a hold filed and a crash left named
            # by nothing is met, and dropped, before the end.
            pause_recheck=timedelta(seconds=60),
        )
        self.workflows = Registry.of([workflow])
        self.store = FakeOrderStore(self.fault, self.policy.pending_grace)
        # The Supervisor reads it every tick; Agents and the Scheduler through a view of their
        # own that may be LAG late (instance_view), as deployed.
        self.pauses = FakePauses(self.fault)
        # Each target's pauses as they happened, [from, to or None while it lasts].
        self.pause_spans: dict[Target, list[list[datetime | None]]] = {}
        relay = EffectRelay(store=self.store, sender=self.queues, alerts=self.alerts,
                            workflows=self.workflows, agent_queues=AGENT_QS,
                            scheduler_queue=SCHEDULER_Q, clock=self.clock)
        self.scheduler = Scheduler(instance_id="s1", store=self.store, relay=relay,
                                   workflows=self.workflows, clock=self.clock,
                                   queues=Queues(self.queues, SCHEDULER_Q, RESPONSES_Q),
                                   pauses=self.instance_view())
        # As bootstrap wires it: intake hands its start to the Scheduler in-process.
        self.intake = IntakeHandler(
            store=self.store, rejections=FakeRejections(self.fault), alerts=self.alerts,
            relay=relay, scheduler=self.scheduler, workflows=self.workflows,
            reply_allowed=lambda q: True, clock=self.clock)
        self.ticks = FakeTickLog(self.fault)
        self.supervisor = Supervisor(store=self.store, ticks=self.ticks, relay=relay,
                                     alerts=self.alerts,
                                     policy=self.policy, workflows=self.workflows,
                                     clock=self.clock, pauses=self.pauses)
        self.operator = Operator(
            store=self.store, relay=relay, alerts=self.alerts,
            rejections=FakeRejections(self.fault), health=HealthProbe({}),
            pending_grace=self.policy.pending_grace, clock=self.clock,
            pauses=PauseControl(store=self.pauses, services=list(AGENT_QS),
                                workflows=[workflow.name], clock=self.clock))
        # Re-drives, and their runner, as a timer runs it: with the operator's resubmit.
        self.redrives = FakeRedrives(self.fault)
        self.redrive_control = RedriveControl(store=self.redrives, orders=self.store,
                                              workflows=self.workflows, limits={},
                                              clock=self.clock)
        self.redriver = RedriveRunner(
            store=self.redrives, orders=self.store, workflows=self.workflows,
            clock=self.clock, pauses=self.pauses, instance="runner",
            resubmit=lambda oid, why, force, by, generation: self.operator.resubmit(
                oid, why, force, by, generation),
            sleep=lambda s: self.clock.advance(seconds=s),
            monotonic=lambda: self.clock.now.timestamp(), workers=1)
        # Each Agent's view of the pauses, and the requests one dropped uncalled for a pause:
        # order, step, attempt and the complete-by that send of it carried.
        self.views = {name: self.instance_view() for name in AGENT_QS}
        self.dropped: set[tuple[str, str, int, datetime]] = set()
        self.agents = {
            name: Agent(
                name=name, client=ModelClient(name, self.model, self),  # type: ignore[arg-type]
                policy=AgentRetryPolicy(base_delay=2, max_delay=8, call_timeout=5),
                breaker=CircuitBreaker(name, 10**6, 1),
                clock=self.clock, check=RequestCheck(self.store, self.workflows, self.alerts),
                sleep=lambda s: self.clock.advance(seconds=s), pauses=self.views[name])
            for name in AGENT_QS
        }
        self.orders: dict[str, bytes] = {}
        self.bad: set[str] = set()
        # Those of them the next release wrote, with the version it left: never written here.
        self.newer: dict[str, str] = {}
        self.forged = 0  # requests an attacker put on the Agents' queues
        self.cancelled: set[str] = set()  # orders an operator cancelled
        # Orders not begun at the last check while their workflow was paused (None: it ran).
        self.waiting: set[str] | None = None
        # Completed ticks in a row that found a readable order overdue and left it as it was.
        self.overdue_ticks: dict[str, int] = {}
        self.storage_down = False
        self.outages: list[tuple[datetime, datetime]] = []
        self.fired = False  # a planned fault went off (since the flag was last cleared)

    # --- the machinery the rules share ---------------------------------------------------------

    def fault(self, op: str) -> None:
        if self.storage_down:
            raise StorageDown(op)
        if self.plan is None:
            return
        self.plan.countdown -= 1
        if self.plan.countdown == 0:
            self.fired = True
            kind, self.plan = self.plan.kind, None
            if kind == "crash":
                raise Crash(op)
            raise StorageDown(op)

    def outcome(self) -> str:
        return self.draw_outcome() if self.draw_outcome else "ok"

    def run(self, fault: tuple[int, str] | None, action: Any) -> bool:
        """Run one function invocation; True when it finished, False when it failed or died."""
        self.plan = FaultPlan(*fault) if fault else None
        try:
            action()
            return True
        except (Crash, StorageDown):
            return False
        finally:
            self.plan = None

    def paused(self, target: Target) -> bool:
        '''What the store says, read without a fault.'''
        record = self.pauses.records.get(target)
        return record is not None and record[0].paused

    def held_everywhere(self, target: Target) -> bool:
        '''Paused for longer than an instance may take to learn of it (pauses.LAG).'''
        record = self.pauses.records.get(target)
        since = record[0].since if record is not None else None
        return since is not None and self.clock.now - since > LAG

    def instance_view(self) -> CachedPauses:
        '''An instance's view of the pauses, read at most every LAG, as deployed.'''
        return CachedPauses(self.pauses, LAG.total_seconds(),
                            monotonic=lambda: self.clock.now.timestamp())

    def note_pauses(self) -> None:
        '''The spans of every pause, from the store: a pause or resume that died after its
        write took hold all the same.'''
        for target in TARGETS:
            spans = self.pause_spans.setdefault(target, [])
            is_open = bool(spans) and spans[-1][1] is None
            if self.paused(target) and not is_open:
                spans.append([self.clock.now, None])
            elif not self.paused(target) and is_open:
                spans[-1][1] = self.clock.now

    def handle(self, queue: str, m: QueuedMessage) -> None:
        if queue == SCHEDULER_Q:
            waiting = {o for o, s in self.store.states.items() if not begun(s)}
            try:
                self.scheduler.handle_command(m.body, m.dequeue_count > 1)
            finally:
                if self.held_everywhere(Target(PauseKind.WORKFLOW, self.workflow.name)):
                    started = [o for o in waiting if self.store.states[o].process_state
                               is ProcessState.PROCESSING]
                    assert not started, f"{started} started while their workflow was paused"
            return
        if queue == RESPONSES_Q:
            self.scheduler.handle_reply(m.body, m.dequeue_count > 1)
        else:
            agent = next(n for n, q in AGENT_QS.items() if q == queue)
            if self.views[agent].current().service(agent).paused:
                with contextlib.suppress(ValueError):  # a forged body may be anything
                    r = AgentRequest.model_validate_json(m.body)
                    self.dropped.add((r.order_id, r.step, r.attempt, r.complete_by))
            reply = self.agents[agent].handle(m.body)
            if reply is not None:  # the output binding: the host sends it after the return
                self.queues.send(RESPONSES_Q, reply.to_json())

    def process(self, queue: str, index: int, fault: tuple[int, str] | None) -> None:
        visible = self.queues.visible(queue)
        if not visible:
            return
        m = self.queues.receive(queue, visible[index % len(visible)])
        if m is None:
            return  # to the poison queue, as the host does after maxDequeueCount
        if self.run(fault, lambda: self.handle(queue, m)):
            self.queues.complete(queue, m)

    # --- rules: what happens in production -----------------------------------------------------

    @rule(i=st.integers(0, len(ORDER_IDS) - 1), fault=FAULTS)
    def deliver_order(self, i: int, fault: tuple[int, str] | None) -> None:
        """Service Bus delivers an order (again, for a duplicate or a redelivery)."""
        oid = ORDER_IDS[i]
        body = self.orders.setdefault(oid, json.dumps({
            "order_id": oid, "customer_id": "c", "reply_to": f"status-{oid}",
            "items": [{"sku": "A", "quantity": 1, "unit_price": "1.00"}]}).encode())
        flow = Target(PauseKind.WORKFLOW, self.workflow.name)
        new, paused = oid not in self.store.states, self.held_everywhere(flow)
        self.run(fault, lambda: self.intake.handle(f"m-{oid}", body))
        if new and paused and oid in self.store.states:  # taken, and waits Pending
            assert not begun(self.store.states[oid]), f"{oid} began while its workflow paused"

    @precondition(lambda self: any(self.queues.visible(q) for q in WORK_QUEUES))
    @rule(data=st.data(), q=st.sampled_from(WORK_QUEUES), index=st.integers(0, 3), fault=FAULTS)
    def handle_message(self, data: st.DataObject, q: str, index: int,
                       fault: tuple[int, str] | None) -> None:
        self.draw_outcome = lambda: data.draw(OUTCOMES, label="remote call")
        try:
            self.process(q, index, fault)
        finally:
            self.draw_outcome = None

    @rule(seconds=st.sampled_from([1, 5, 11, 30, 61]), fault=FAULTS)
    def supervisor_tick(self, seconds: int, fault: tuple[int, str] | None) -> None:
        self.clock.advance(seconds=seconds)
        self.run(fault, self.tick)

    @rule(seconds=st.sampled_from([16, 20, 45, 120]), tries=st.integers(0, 3))
    def storage_outage(self, seconds: int, tries: int) -> None:
        """Storage stops answering for a while; the Supervisor keeps trying, and failing."""
        start = self.clock.now
        self.storage_down = True
        try:
            for _ in range(tries):
                self.clock.advance(seconds=seconds / (tries + 1))
                assert not self.run(None, self.tick), "a tick worked with storage down"
            self.clock.now = start + timedelta(seconds=seconds)
        finally:
            self.storage_down = False
        self.outages.append((start, self.clock.now))

    def tick(self) -> None:
        """A Supervisor tick, held to: no order's failures rise for time spent in an outage.

        A step's attempt runs from its complete-by less its budget to its complete-by; if that
        overlaps an outage, the tick may send it again but not count a failure, unless the
        order has used up its rescues (RescueThreshold bounds the free retries).
        """
        before = {oid: copy.deepcopy(s) for oid, s in self.store.states.items()
                  if oid not in self.bad}
        started = self.clock.now
        self.fired = False
        self.supervisor.tick()
        if not self.fired:
            # A tick whose storage failed under it (and that went on with the other orders)
            # may leave an order as it was: it says nothing of the tick's budget.
            self.no_readable_order_stays_overdue(before, started)
        flow = Target(PauseKind.WORKFLOW, self.workflow.name)
        for oid, old in before.items():
            new = self.store.states.get(oid)
            if new is not None and new.rescues > old.rescues and not begun(old):
                waited = [(a, b) for a, b in self.pause_spans.get(flow, [])
                          if a is not None and a < self.clock.now
                          and old.updated_at < (b or self.clock.now)]
                assert not waited, (f"{oid}: a rescue was counted for an order whose start "
                                    f"waited for its paused workflow\n" + self.story(oid))
            step = old.current_step
            if new is None or step is None or step.complete_by is None:
                continue
            counted = (new.failure_count > old.failure_count
                       or new.compensation_failure_count > old.compensation_failure_count)
            if not counted:
                continue
            assert (oid, step.name, step.attempt, step.complete_by) not in self.dropped, (
                f"{oid}: a failure was counted for {step.name} attempt {step.attempt}, whose "
                "request its Agent dropped uncalled for a pause\n" + self.story(oid))
            budget = self.workflow.step(step.name).budget
            window = (step.complete_by - budget, step.complete_by)
            service = Target(PauseKind.SERVICE, SERVICE_OF_STEP[step.name])
            met = [(a, b or self.clock.now) for a, b in self.pause_spans.get(service, [])
                   if a is not None and a < window[1] and window[0] < (b or self.clock.now)]
            assert not met, (
                f"{oid}: a failure was counted for {step.name} attempt {step.attempt} "
                f"({window[0]:%H:%M:%S} to {window[1]:%H:%M:%S}), which met a pause of {service} "
                f"({met[0][0]:%H:%M:%S} to {met[0][1]:%H:%M:%S})\n" + self.story(oid))
            if old.rescues >= self.policy.rescue_threshold:
                continue  # its rescues used up: an outage's retries are no longer free
            during = [o for o in self.outages if o[0] < window[1] and window[0] < o[1]]
            assert not during, (
                f"{oid}: a failure was counted for {step.name} attempt {step.attempt} "
                f"({window[0]:%H:%M:%S} to {window[1]:%H:%M:%S}), whose time fell in the "
                f"outage {during[0][0]:%H:%M:%S} to {during[0][1]:%H:%M:%S}\n" + self.story(oid))

    def no_readable_order_stays_overdue(self, before: dict[str, Any], started: datetime) -> None:
        """Each tick carries out at most MAX_RECOVERIES recoveries, and an unreadable record
        counts against them only once (then it is filed aside), so an overdue order waits at
        most one tick per MAX_RECOVERIES records in its way, and a tick for the orders ahead."""
        bound = len(self.bad) // MAX_RECOVERIES + len(ORDER_IDS) + 1
        for oid, old in before.items():
            new = self.store.states.get(oid)
            overdue = (not old.is_settled
                       and due_at(old, self.policy.pending_grace) <= started)
            if not overdue or new is None or new.version != old.version:
                self.overdue_ticks.pop(oid, None)
                continue
            n = self.overdue_ticks[oid] = self.overdue_ticks.get(oid, 0) + 1
            assert n <= bound, (
                f"{oid} was overdue (due {due_at(old, self.policy.pending_grace):%H:%M:%S}) and "
                f"left as it was by {n} ticks in a row, with {len(self.bad)} unreadable "
                f"records about\n" + self.story(oid))

    @precondition(lambda self: len(self.bad) < len(BAD_IDS))
    @rule(data=st.data(), kind=st.sampled_from(["corrupt", "next release's, unreadable here",
                                                "next release's, readable"]))
    def a_record_this_release_must_not_run(self, data: st.DataObject, kind: str) -> None:
        """A state record this release cannot or must not run sits in the index in front of,
        or among, the orders': corrupted; or written by the next release (a rolling deployment,
        or one rolled back), in a shape this one cannot read or in one it can (a SchemaVersion
        above its own: rules it may not know)."""
        oid = data.draw(st.sampled_from([b for b in BAD_IDS if b not in self.bad]))
        order = parse_order(json.dumps({
            "order_id": oid, "customer_id": "c",
            "items": [{"sku": "A", "quantity": 1, "unit_price": "1.00"}]}).encode())
        stored = self.store.create(order, receive(
            oid, self.workflow,
            self.clock.now - timedelta(seconds=data.draw(st.integers(0, 120)))))
        if kind == "corrupt":
            self.store.corrupt[oid] = "ProcessState: 'Exploded' is not a valid ProcessState"
        elif kind == "next release's, unreadable here":
            self.store.corrupt[oid] = "newer: ProcessState: 'Held' is not a valid ProcessState"
        else:
            self.store.states[oid].schema_version = SCHEMA_VERSION + 1
        if kind != "corrupt":
            self.newer[oid] = stored.version or ""
        self.bad.add(oid)

    @precondition(lambda self: any(not s.is_settled and s.index_key
                                   for o, s in self.store.states.items() if o not in self.bad))
    @rule(i=st.integers(0, len(ORDER_IDS) - 1), named=st.booleans())
    def filed_as_before_the_due_index(self, i: int, named: bool) -> None:
        """The order's index entry is one an earlier release wrote: in the old ``inflight``
        partition, with (75e3701) or without (d227dda) OrderID and Generation, and the record
        naming none, as those releases' records did."""
        state = self.store.states.get(ORDER_IDS[i])
        if state is None or state.is_settled or state.index_key is None:
            return
        row = f"{state.order_id}@{state.generation}" if named else state.order_id
        props = {"OrderID": state.order_id, "Generation": state.generation} if named else {}
        legacy = entry_from_index({"PartitionKey": due_index.LEGACY_PARTITION, "RowKey": row,
                                   **props})
        self.store.index.pop(state.index_key, None)
        self.store.index[legacy.key] = legacy
        state.index_key = None

    @precondition(lambda self: any(self.queues.visible(q) for q in AGENT_QS.values()))
    @rule(q=st.sampled_from(list(AGENT_QS.values())), index=st.integers(0, 3))
    def sent_by_a_release_before_work_keys(self, q: str, index: int) -> None:
        """An Agent request as releases before 75e3701 sent it: an undo named its work only by
        its own key, and no request carried an outbox sequence number."""
        visible = self.queues.visible(q)
        if not visible:
            return
        m = visible[index % len(visible)]
        body = json.loads(m.body)
        body.pop("compensates", None)
        body.pop("outbox_seq", None)
        m.body = json.dumps(body)

    @rule(i=st.integers(0, len(ORDER_IDS) - 1), step=st.sampled_from(list(SERVICE_OF_STEP)),
          action=st.sampled_from(list(Action)), attempt=st.integers(1, 4),
          generation=st.integers(0, 2), made_up=st.booleans())
    def an_attacker_sends_a_request(self, i: int, step: str, action: Action, attempt: int,
                                    generation: int, made_up: bool) -> None:
        """Anyone with write access to an Agent's queue (or the master key, through the host's
        admin API) hands it a request: an undo of a processed order's work, work for a failed
        order, an attempt never sent, a key of its own. The Agent does only what the order's
        record says the Scheduler asked for now."""
        oid = ORDER_IDS[i]
        work = new_work_key(oid, step, generation)
        key = f"{oid}.{step}.forged" if made_up else (
            work if action is Action.DO else undo_key(work))
        wf_step = self.workflow.step(step)
        self.queues.send(AGENT_QS[SERVICE_OF_STEP[step]], AgentRequest(
            order_id=oid, step=step, action=action,
            operation=wf_step.operation_for(action.value), attempt=attempt,
            complete_by=self.clock() + wf_step.budget, idempotency_key=key,
            compensates=work if action is Action.UNDO else None,
            order={"order_id": oid}).to_json())
        self.forged += 1

    @rule(i=st.integers(0, len(ORDER_IDS) - 1), step=st.sampled_from(list(SERVICE_OF_STEP)),
          action=st.sampled_from(list(Action)), attempt=st.integers(1, 4), ok=st.booleans())
    def an_attacker_sends_a_reply(self, i: int, step: str, action: Action, attempt: int,
                                  ok: bool) -> None:
        """Anyone with write access to the replies queue answers for an Agent: a step done
        that was never done, an undo that never happened. Only a reply carrying its attempt's
        token (which only the request held) moves an order; the teardown then finds each
        Processed order's work standing at the services, and each compensated order's undone."""
        oid = ORDER_IDS[i]
        self.queues.send(RESPONSES_Q, AgentReply(
            order_id=oid, step=step, action=action, attempt=attempt,
            outcome=ReplyOutcome.OK if ok else ReplyOutcome.PERMANENT_ERROR,
            error=None if ok else "HTTP 422 made up").to_json())
        self.forged += 1

    @rule(seconds=st.sampled_from([1, 10, 60]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds=seconds)

    @rule(data=st.data())
    def everything_settles(self, data: st.DataObject) -> None:
        """A quiet while: every message handled and time running on, with remote calls still
        going either way, so that later rules (a resubmit above all) meet settled orders."""
        self.draw_outcome = lambda: data.draw(OUTCOMES, label="remote call")
        try:
            self.time_runs_on()
        finally:
            self.draw_outcome = None

    @precondition(lambda self: bool(self.store.states))
    @rule(i=st.integers(0, len(ORDER_IDS) - 1), force=st.booleans(), fault=FAULTS)
    def operator_resubmits(self, i: int, force: bool, fault: tuple[int, str] | None) -> None:
        oid = ORDER_IDS[i]
        if oid not in self.store.states:
            return

        def resubmit() -> None:
            with contextlib.suppress(ResubmitRefused):
                self.operator.resubmit(oid, "cause fixed", force=force)

        self.run(fault, resubmit)

    @precondition(lambda self: bool(self.store.states))
    @rule(i=st.integers(0, len(ORDER_IDS) - 1), fault=FAULTS)
    def operator_resumes_a_parked_order(self, i: int, fault: tuple[int, str] | None) -> None:
        """The person has acted: a parked order goes on from its step, under the same key;
        anything else is refused."""
        oid = ORDER_IDS[i]
        if oid not in self.store.states:
            return

        def resume() -> None:
            with contextlib.suppress(ResumeRefused):
                self.operator.resume(oid, "customer confirmed", by="model operator")

        self.run(fault, resume)

    @precondition(lambda self: bool(self.store.states))
    @rule(i=st.integers(0, len(ORDER_IDS) - 1), fault=FAULTS)
    def operator_cancels(self, i: int, fault: tuple[int, str] | None) -> None:
        """At any point of an order's life, racing its replies, ticks and resubmits: it ends
        Cancelled with its work undone, or the cancel is refused (Processed, failed)."""
        oid = ORDER_IDS[i]
        if oid not in self.store.states:
            return

        def cancel() -> None:
            with contextlib.suppress(CancelRefused):
                self.operator.cancel(oid, "customer withdrew", by="model operator")
                self.cancelled.add(oid)

        self.run(fault, cancel)

    @rule(step=st.sampled_from([None, *SERVICE_OF_STEP]),
          act=st.sampled_from(["start", "start", "pause", "resume", "cancel"]), fault=FAULTS)
    def operator_redrives(self, step: str | None, act: str,
                          fault: tuple[int, str] | None) -> None:
        """A re-drive of the failed orders (all, or those failed at a step) started, or the
        newest paused, resumed or cancelled, racing the pipeline, resubmits and cancels."""
        newest = sorted(self.redrives.records)[:1]

        def do() -> None:
            with contextlib.suppress(RedriveRefused):
                if act == "start":
                    self.redrive_control.start(RedriveRequest(
                        failed_step=step, reason="provider back", rate=2, dry_run=False),
                        "model operator")
                elif newest:
                    change = {"pause": self.redrive_control.pause,
                              "resume": self.redrive_control.resume,
                              "cancel": self.redrive_control.cancel}[act]
                    change(newest[0], "", "model operator")

        self.run(fault, do)

    @precondition(lambda self: any(s.process_state is ProcessState.ERROR and s.is_settled
                                   for s in self.store.states.values()))
    @rule(seconds=st.sampled_from([0.4, 1.2, 9]), fault=FAULTS,
          dies_after=st.sampled_from([None, 1, 2]))
    def a_redrive_takes_the_failed_orders(self, seconds: float, fault: tuple[int, str] | None,
                                          dies_after: int | None) -> None:
        """Failed orders there are: a re-drive of them started a second later, and its runner
        run at once, dying anywhere (the race with the rest: the two rules around)."""
        self.clock.advance(seconds=1)
        self.operator_redrives(None, "start", None)
        self.the_redrive_runner_runs(seconds, fault, dies_after)

    @precondition(lambda self: bool(self.redrives.records))
    @rule(seconds=st.sampled_from([0.4, 1.2, 9]), fault=FAULTS,
          dies_after=st.sampled_from([None, 1, 2]))
    def the_redrive_runner_runs(self, seconds: float, fault: tuple[int, str] | None,
                                dies_after: int | None) -> None:
        """Its timer's run, cut short or dying at any write it makes, or right after its
        ``dies_after``-th resubmit took (before it counted it)."""
        made = 0

        def resubmit(oid: str, why: str, force: bool, by: str | None) -> object:
            nonlocal made
            view = self.operator.resubmit(oid, why, force, by)
            made += 1
            if made == dies_after:
                event("the re-drive runner died right after a resubmit")
                raise Crash("after a resubmit")
            return view

        plain = self.redriver.resubmit
        self.redriver.resubmit = resubmit
        try:
            self.run(fault, lambda: self.redriver.run(seconds))
        finally:
            self.redriver.resubmit = plain

    @rule(what=st.sampled_from(TARGETS), aimed=st.booleans(), resume=st.booleans(),
          fault=FAULTS, then=st.sampled_from([0, 0, 8, 30]))
    def operator_pauses_or_resumes(self, what: Target, aimed: bool, resume: bool,
                                   fault: tuple[int, str] | None, then: int) -> None:
        """A service or the workflow's intake paused or resumed at any point, racing orders,
        replies, ticks, cancels and resubmits: no order fails or is undone for the time it
        waited, the Agent never calls a paused service, and all finish once resumed."""
        control = self.operator.pauses
        running = [s.current_step.name for s in self.store.states.values()
                   if s.current_step is not None]
        if aimed and running:  # the service an order's step is at now: the pause that bites
            what = Target(PauseKind.SERVICE, SERVICE_OF_STEP[running[0]])

        def act() -> None:
            with contextlib.suppress(PauseRefused):
                if resume:
                    control.resume(what.kind.value, what.name, "", by="model operator")
                else:
                    control.pause(what.kind.value, what.name, "provider incident",
                                  by="model operator")

        self.run(fault, act)
        self.note_pauses()
        # The pipeline runs on meanwhile, its work waiting or not, a second at a time: within
        # the LAG an instance may take to learn of the change.
        for _ in range(then):
            for i, oid in enumerate(ORDER_IDS):  # and orders keep coming
                if oid not in self.store.states:
                    self.deliver_order(i, None)
                    break
            for q in WORK_QUEUES:
                while self.queues.visible(q):
                    self.process(q, 0, None)
            self.clock.advance(seconds=1)
            self.tick()

    # --- what must always hold -----------------------------------------------------------------

    @invariant()
    def a_redrive_resubmits_an_order_once_and_counts_what_it_did(self) -> None:
        """Whatever dies where: no order is resubmitted twice by one re-drive, and every
        resubmit a re-drive made is counted on it, or is in its hand (its page's picks)."""
        for rid, (redrive, _) in self.redrives.records.items():
            named = Counter(oid for oid, state in self.store.states.items()
                            for h in state.history if str(h.get("reason", "")).startswith(
                                f"re-drive {rid}:"))
            twice = [oid for oid, n in named.items() if n > 1]
            assert not twice, f"re-drive {rid} resubmitted {twice} more than once"
            in_hand = {p.order_id for p in redrive.batch}
            uncounted = len([o for o in named if o not in in_hand]) - redrive.resubmitted
            assert uncounted <= 0, (
                f"re-drive {rid}: {uncounted} of its resubmits are neither counted nor in hand")
            assert redrive.resubmitted <= len(named), (
                f"re-drive {rid} counts {redrive.resubmitted} resubmits; it made {len(named)}")

    @invariant()
    def a_paused_workflow_starts_no_new_order(self) -> None:
        self.note_pauses()
        flow = Target(PauseKind.WORKFLOW, self.workflow.name)
        waiting = {o for o, s in self.store.states.items() if not begun(s)}
        if self.held_everywhere(flow) and self.waiting is not None:
            started = [o for o in self.waiting
                       if self.store.states[o].process_state is ProcessState.PROCESSING]
            assert not started, f"{started} started while their workflow was paused"
        self.waiting = waiting if self.held_everywhere(flow) else None

    @invariant()
    def only_a_request_the_app_never_sent_is_refused(self) -> None:
        refused = [a for a in self.alerts.alerts.values()
                   if a.kind is AlertKind.REQUEST_REFUSED]
        assert len(refused) <= self.forged, (
            f"{len(refused)} refusals, {self.forged} forged: the app's own request was refused: "
            + "; ".join(a.reason for a in refused))

    @invariant()
    def no_business_effect_stands_twice(self) -> None:
        for oid in self.store.states:
            twice = {step: n for step, n in self.model.standing(oid).items() if n > 1}
            assert not twice, (f"{oid}: work standing more than once at the services: {twice}\n"
                               + self.story(oid))

    @invariant()
    def every_order_in_flight_is_filed_by_its_due_time(self) -> None:
        """The Supervisor reads only the index entries whose time has come: an order it could
        not find there by its due time would never be recovered."""
        legacy = {e.order_id for e in self.store.index.values()
                  if IndexKey.parse(e.key).partition == due_index.LEGACY_PARTITION}
        for oid, state in self.store.states.items():
            if state.is_settled or oid in self.bad:
                continue
            if state.index_key is None and oid in legacy:
                continue  # the old partition is read whole at every tick
            assert state.index_key in self.store.index, (
                f"{oid}: its record names index entry {state.index_key}, which is gone\n"
                + self.story(oid))
            filed = IndexKey.parse(state.index_key).due
            due = due_at(state, self.policy.pending_grace)
            assert filed is not None and filed <= due, (
                f"{oid}: filed at {filed}, due at {due}\n" + self.story(oid))

    def story(self, oid: str) -> str:
        state = self.store.states[oid]
        return "\n".join([
            *(line for line in self.model.log if f" for {oid}:" in line),
            f"history: {state.history}",
            f"steps: {[s.to_dict() for s in state.steps]}",
            "effects: " + repr([(k, self.model.owner[k][1], v)
                                for k, v in self.model.status.items()
                                if self.model.owner[k][0] == oid]),
        ])

    def teardown(self) -> None:
        self.time_runs_on()
        left = sorted(k for k, e in self.store.index.items() if e.order_id not in self.bad)
        assert not left, f"index entries left behind: {left}"
        for oid in self.bad:  # reported at most once each, however many ticks met it
            assert len(self.alerts.of(oid, AlertKind.RECORD_UNREADABLE)) <= 1, oid
        for oid, version in self.newer.items():  # the next release's: left to it, unreported
            assert self.store.states[oid].version == version, f"{oid} was written here"
            # Never reported as broken. Storage failing as its entry is read, tick after tick,
            # is reported as for any order: nothing yet says whose the record is.
            assert [a for a in self.alerts.of(oid)
                    if a.kind is not AlertKind.SUPERVISION_FAILING] == [], (
                oid, self.alerts.of(oid))
        for oid, state in self.store.states.items():
            if oid in self.bad:
                continue
            event(f"{state.process_state.value}, compensation {state.compensation}, "
                  f"generation {state.generation}")
            if any("learned" in str(e.get("detail")) or "nothing to undo" in str(e.get("detail"))
                   for e in state.timeline):
                event("a step in doubt was asked again under its key before its undo")
            notes = " ".join(str(e.get("detail")) for e in state.timeline)
            if "waiting: service" in notes:
                event("a step waited for its paused service" + (
                    ", and was sent again once it resumed" if "sent again, not counted" in notes
                    else ""))
            if "waiting: workflow" in notes:
                event("an order waited for its paused workflow")
            if any(e.get("event") == "parked" for e in state.timeline):
                event("an order was parked for a person" + (
                    ", and resumed" if "resumed: customer confirmed" in notes else ""))
            assert state.is_settled, (
                f"{oid} is stuck: {state.process_state} compensation {state.compensation}, "
                f"steps {[(s.name, s.status.value) for s in state.steps]}")
            standing = self.model.standing(oid)
            if oid in self.cancelled:  # once cancelled, it stays so: never run on, never redone
                assert state.process_state is ProcessState.CANCELLED, (
                    f"{oid} was cancelled but is {state.process_state}\n" + self.story(oid))
            if state.process_state is ProcessState.PROCESSED:
                assert standing == Counter(dict.fromkeys(SERVICE_OF_STEP, 1)), (
                    f"{oid} is Processed but its work at the services is {dict(standing)}\n"
                    + self.story(oid))
            elif state.compensation is CompensationState.DONE:
                assert not standing, (
                    f"{oid} reads compensated but its work still stands: {dict(standing)}\n"
                    + self.story(oid))
            failures = len(state.history) + (state.process_state is ProcessState.ERROR)
            failed_alerts = len(self.alerts.of(oid, AlertKind.ORDER_FAILED))
            assert failed_alerts >= failures, (
                f"{oid} failed {failures} time(s) but the operator was alerted {failed_alerts}")
            comp_failures = sum(h.get("compensation") == "Failed" for h in state.history) + (
                state.compensation is CompensationState.FAILED)
            assert len(self.alerts.of(oid, AlertKind.COMPENSATION_FAILED)) >= comp_failures, (
                f"{oid}: a failed compensation reached no operator")

    def time_runs_on(self) -> None:
        """No more faults: every pause resumed, deliver what is left, handle every message,
        tick, until quiet."""
        for target in TARGETS:
            with contextlib.suppress(PauseRefused):
                self.operator.pauses.resume(target.kind.value, target.name, "", by="model")
        self.note_pauses()
        for _ in range(400):
            self.redriver.run(9)  # its timer: what a re-drive has in hand is finished
            for oid, body in self.orders.items():
                if oid not in self.store.states:
                    self.intake.handle(f"m-{oid}", body)
                elif self.store.states[oid].process_state is ProcessState.PARKED:
                    self.operator.resume(oid, "customer confirmed", by="model")
            for q in WORK_QUEUES:
                while self.queues.visible(q):
                    self.process(q, 0, None)
            # Quiet: every order settled, nothing left to handle, and every settled order's
            # effects carried out (it leaves the in-flight index last).
            if all(s.is_settled and s.process_state is not ProcessState.PARKED
                   for o, s in self.store.states.items() if o not in self.bad) and (
                    not any(self.queues.queues.get(q) for q in WORK_QUEUES)) and all(
                    e.order_id in self.bad for e in self.store.index.values()):
                return
            self.clock.advance(seconds=5)
            self.tick()


settings.register_profile("default", max_examples=400, stateful_step_count=50,
                          deadline=None, suppress_health_check=list(HealthCheck))
# make unit: the developer's loop, a quarter of the search (the whole suite runs the default).
settings.register_profile("quick", max_examples=100, stateful_step_count=50,
                          deadline=None, suppress_health_check=list(HealthCheck))
# make soak: a longer search (about ten minutes); HYPOTHESIS_SEED repeats a run.
settings.register_profile("soak", max_examples=20_000, stateful_step_count=80,
                          deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
TestPipelineGuarantees = PipelineMachine.TestCase
