"""The Supervisor: finds overdue work in the in-flight index and asks the Scheduler to recover it.

Knows nothing of the business. Every change it makes is a conditional write, so two Supervisors
ticking at once recover each overdue step once: the second one's write loses and it moves on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from shared.adapters.queues import MessageSender
from shared.adapters.state_store import ConcurrencyConflict, TableOrderStore
from shared.clock import Clock
from shared.domain.messages import CommandKind, SchedulerCommand
from shared.domain.state import RetryPolicy, supervise
from shared.handlers.notify import Notifier

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    entities_read: int = 0
    in_flight: int = 0
    retried: int = 0
    failed: int = 0
    rescued: int = 0
    forgotten: int = 0
    lost_races: int = 0


class Supervisor:
    def __init__(self, *, store: TableOrderStore, sender: MessageSender, notifier: Notifier,
                 policy: RetryPolicy, scheduler_queue: str, clock: Clock) -> None:
        self._store = store
        self._sender = sender
        self._notifier = notifier
        self._policy = policy
        self._scheduler_queue = scheduler_queue
        self._clock = clock

    def tick(self) -> TickReport:
        report = TickReport()
        now = self._clock()
        for entry in self._store.in_flight():
            report.entities_read += 1
            report.in_flight += 1
            state = self._store.get_state(entry.order_id)
            if state is None:
                # Intake writes the index entry first; if the order never followed, drop it.
                if entry.since + self._policy.pending_grace < now:
                    self._store.forget(entry.order_id)
                    report.forgotten += 1
                continue
            report.entities_read += 1
            decision = supervise(state, now, self._policy)
            if decision is None:
                continue
            if decision.forget:
                self._store.forget(state.order_id)
                report.forgotten += 1
                continue
            try:
                saved = self._store.save(decision.transition.state)
            except ConcurrencyConflict:
                report.lost_races += 1  # someone moved it first: their move stands
                continue
            # Alerts first: a lost command is recovered (the record is overdue again after its
            # new CompleteBy), a lost alert would not be.
            self._notifier.publish(saved.order_id, saved.reply_to, decision.transition.events,
                                   now)
            if decision.command is not None:
                cmd = SchedulerCommand(kind=CommandKind(decision.command), order_id=saved.order_id,
                                       reason=decision.reason)
                self._sender.send(self._scheduler_queue, cmd.to_json(), decision.delay)
            if decision.kind == "fail":
                report.failed += 1
            elif decision.kind == "rescue":
                report.rescued += 1
            else:
                report.retried += 1
            log.warning("supervisor: order %s %s (%s)", saved.order_id,
                        decision.command or "settled", decision.reason)
        log.info("supervisor tick: %s", report)
        return report
