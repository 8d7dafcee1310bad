"""Re-drives on the fakes: what one picks, its pace, its progress, an operator's pause, resume
and cancel, and a runner dying at every write it makes (each order resubmitted once, every one
counted once). The API and the CLI on Azurite: tests/integration/test_redrive.py."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.domain.limits import Limit
from shared.domain.pauses import Pause, PauseKind, Target
from shared.domain.redrive import PAGE, RedriveState
from shared.domain.state import CompensationState, ProcessState
from shared.domain.transitions import receive
from shared.domain.workflow import Registry
from shared.handlers.operator_requests import RedriveRequest
from shared.handlers.redrive import RedriveRunner, Stopped
from shared.handlers.redriving import RedriveControl, RedriveRefused, UnknownRedrive
from shared.workflows.orders.message import parse_order
from tests.conftest import FakeClock
from tests.fakes import Crash, FakeOrderStore, FakePauses, FakeRedrives
from tests.unit.test_operator import operator_over
from tests.workflow import FLOW

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


class World:
    def __init__(self, failed: int = 0, limits: dict[str, Limit] | None = None) -> None:
        self.clock = FakeClock(T0)
        self.store = FakeOrderStore()
        self.redrives = FakeRedrives()
        self.pauses = FakePauses()
        self.operator = operator_over(self.store, self.clock)
        self.control = RedriveControl(store=self.redrives, orders=self.store,
                                      workflows=Registry.of([FLOW]), limits=limits or {},
                                      clock=self.clock)
        self.resubmits: list[tuple[str, float]] = []
        for i in range(failed):
            self.fail(f"o-{i:05d}", step="take", error="HTTP 503 from beta")
        self.clock.advance(minutes=1)

    def fail(self, order_id: str, step: str, error: str) -> None:
        o = parse_order(json.dumps({"order_id": order_id, "customer_id": "c",
                                    "items": [{"sku": "A", "quantity": 1, "unit_price": "1"}]}))
        s = self.store.create(o, receive(order_id, FLOW, self.clock.now))
        s.process_state, s.compensation = ProcessState.ERROR, CompensationState.DONE
        s.failed_step, s.last_error = step, error
        self.store.save(s)

    def resubmit(self, order_id: str, reason: str, force: bool, by: str | None,
                 generation: int) -> object:
        self.resubmits.append((order_id, self.monotonic()))
        return self.operator.resubmit(order_id, reason, force, by, generation)

    def monotonic(self) -> float:
        return (self.clock.now - T0).total_seconds()

    def runner(self, instance: str = "r1") -> RedriveRunner:
        return RedriveRunner(store=self.redrives, orders=self.store, resubmit=self.resubmit,
                             workflows=Registry.of([FLOW]), clock=self.clock, pauses=self.pauses,
                             sleep=lambda s: self.clock.advance(seconds=s),
                             monotonic=self.monotonic, instance=instance, workers=1)

    def start(self, **ask: Any) -> str:
        return self.control.start(RedriveRequest(reason="beta is back", dry_run=False, **ask),
                                  "ada").Id

    def state(self, order_id: str) -> ProcessState:
        s = self.store.get_state(order_id)
        assert s is not None
        return s.process_state


def test_a_redrive_resubmits_what_it_picks_once_at_its_pace_and_counts_it() -> None:
    w = World(failed=250)
    w.fail("x-other-step", step="hold", error="HTTP 503 from alpha")
    w.fail("x-other-error", step="take", error="HTTP 422 refused")
    preview = w.control.preview(RedriveRequest(failed_step="take", error_text="503"))
    assert (preview.Matched, preview.Scanned, preview.More) == (250, 252, False)
    rid = w.start(failed_step="take", error_text="503", rate=20)
    runner = w.runner()
    for _ in range(10):
        runner.run(8)
        w.clock.advance(seconds=2)  # the timer's next run
    view = w.control.get(rid)
    assert (view.State, view.Resubmitted, view.Refused, view.InHand) == ("done", 250, 0, 0)
    assert view.Scanned >= 252
    assert sorted(o for o, _ in w.resubmits) == [f"o-{i:05d}" for i in range(250)]
    assert w.state("x-other-step") is w.state("x-other-error") is ProcessState.ERROR
    # Never faster than its pace: no two resubmits closer than 1/20 s.
    times = [t for _, t in w.resubmits]
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.05 - 1e-9


def test_the_pace_by_default_is_the_slowest_limit_of_the_workflows_services() -> None:
    w = World(limits={"beta": Limit(per_second=7), "gamma": Limit(at_once=3),
                      "delta": Limit(per_second=1)})
    assert w.control.get(w.start()).Rate == 7
    plain = World()
    assert plain.control.get(plain.start()).Rate == 10


def test_orders_that_fail_after_it_starts_are_not_its_own() -> None:
    w = World(failed=3)
    rid = w.start()
    w.clock.advance(seconds=1)
    w.fail("o-late", step="take", error="HTTP 503 from beta")
    w.runner().run(8)
    assert w.control.get(rid).Resubmitted == 3 and w.state("o-late") is ProcessState.ERROR


@pytest.mark.parametrize("dies_at", ["picked", "resubmit 1", "resubmit 40", "settled"])
def test_a_runner_that_dies_anywhere_leaves_nothing_done_twice_or_uncounted(
        dies_at: str) -> None:
    w = World(failed=PAGE + 20)
    rid = w.start(rate=100)
    writes = {"n": 0}
    done = {"n": 0}

    def fault(op: str) -> None:
        if op == "redrives.write":
            writes["n"] += 1
            # 1: the claim; 2: the first page's picks; 3: its settlement.
            if (dies_at, writes["n"]) in (("picked", 2), ("settled", 3)):
                raise Crash(op)

    def resubmit(order_id: str, reason: str, force: bool, by: str | None,
                 generation: int) -> object:
        done["n"] += 1
        if dies_at.startswith("resubmit") and done["n"] == int(dies_at.split()[1]) + 1:
            raise Crash("resubmit")
        return w.operator.resubmit(order_id, reason, force, by, generation)

    w.redrives.fault = fault
    dying = w.runner("dies")
    dying.resubmit = resubmit
    with pytest.raises(Crash):
        dying.run(8)
    w.redrives.fault = lambda op: None
    w.clock.advance(seconds=30)  # its claim has run out
    for _ in range(5):
        w.runner("next").run(8)
    view = w.control.get(rid)
    assert (view.State, view.Resubmitted, view.Refused) == ("done", PAGE + 20, 0)
    generations = {o: s.generation for o, s in w.store.states.items()}
    assert set(generations.values()) == {1}, "an order was resubmitted twice, or never"


def test_a_paused_redrive_stops_within_a_second_and_goes_on_once_resumed() -> None:
    w = World(failed=60)
    rid = w.start(rate=10)
    runner = w.runner()
    operator_acts_at = 2.5

    def resubmit(order_id: str, reason: str, force: bool, by: str | None,
                 generation: int) -> object:
        if w.monotonic() >= operator_acts_at and w.control.get(rid).State == "running":
            w.control.pause(rid, "looking at the errors", "bo")
        return w.resubmit(order_id, reason, force, by, generation)

    runner.resubmit = resubmit
    runner.run(8)
    paused = w.control.get(rid)
    assert paused.State == "paused" and paused.ChangedBy == "bo"
    assert paused.Resubmitted == len(w.resubmits) <= 10 * (operator_acts_at + 1) + 1
    runner.resubmit = w.resubmit
    runner.run(8)
    assert w.control.get(rid).Resubmitted == paused.Resubmitted  # paused: nothing done
    w.control.resume(rid, "", "bo")
    for _ in range(3):
        runner.run(8)
    assert w.control.get(rid).State == "done" and w.control.get(rid).Resubmitted == 60


def test_a_cancelled_redrive_ends_and_what_it_did_stands() -> None:
    w = World(failed=30)
    rid = w.start(rate=10)
    runner = w.runner()
    runner.run(1.05)
    w.control.cancel(rid, "wrong selection", "bo")
    runner.run(8)
    view = w.control.get(rid)
    assert view.State == "cancelled" and 0 < view.Resubmitted < 30
    assert sum(w.state(f"o-{i:05d}") is ProcessState.ERROR for i in range(30)) == \
        30 - view.Resubmitted
    for act in (w.control.pause, w.control.resume, w.control.cancel):
        with pytest.raises(RedriveRefused, match="cancelled"):
            act(rid, "", "bo")


def test_a_redrive_waits_while_the_service_its_orders_failed_at_is_paused() -> None:
    w = World(failed=5)
    target = Target(PauseKind.SERVICE, "beta")
    w.pauses.write(Pause(target).pause(w.clock.now, "ops", "incident"), None)
    rid = w.start(failed_step="take")
    w.runner().run(8)
    view = w.control.get(rid)
    assert view.Waiting == "service beta is paused" and view.Resubmitted == 0
    pause, version = w.pauses.read(target)
    w.pauses.write(pause.resume(w.clock.now), version)
    w.runner().run(8)
    assert w.control.get(rid).Resubmitted == 5 and w.control.get(rid).Waiting is None


def test_refusals_are_counted_and_the_latest_kept_with_why() -> None:
    w = World(failed=3)
    s = w.store.get_state("o-00001")
    assert s is not None
    s.compensation = CompensationState.FAILED  # needs force
    w.store.save(s)
    rid = w.start()
    w.runner().run(8)
    view = w.control.get(rid)
    # A failed compensation is not picked without force: not a refusal, not counted.
    assert (view.Resubmitted, view.Refused) == (2, 0)


def test_two_runners_never_run_one_redrive_at_once() -> None:
    w = World(failed=5)
    rid = w.start()
    redrive, version = w.redrives.read(rid)
    assert redrive is not None and version is not None
    claimed = redrive.claim("other", w.clock.now, w.clock.now + timedelta(seconds=13))
    w.redrives.write(claimed, version)
    w.runner().run(8)
    assert w.control.get(rid).Resubmitted == 0
    w.clock.advance(seconds=14)
    w.runner().run(8)
    assert w.control.get(rid).Resubmitted == 5


@pytest.mark.parametrize(("ask", "problem"), [
    ({"workflow": "nope"}, "no workflow 'nope'"), ({"version": 9}, "no version 9"),
    ({"failed_step": "nope"}, "no step 'nope'"),
    ({"since": T0, "until": T0}, "since must be before until")])
def test_a_selection_naming_what_the_app_has_not_is_refused_saying_what_it_has(
        ask: dict[str, Any], problem: str) -> None:
    with pytest.raises((ValueError, UnknownRedrive), match=problem):
        World().control.preview(RedriveRequest(**ask))


def test_stopped_is_what_a_runner_says_when_a_redrive_is_not_its_to_run() -> None:
    assert issubclass(Stopped, Exception) and RedriveState.DONE.value == "done"


def test_a_slow_redrive_holds_no_other_back() -> None:
    w = World(failed=10)
    slow = w.start(rate=0.1)
    fast = w.start(rate=100)
    runner = w.runner()
    for _ in range(6):
        runner.run(9)
        w.clock.advance(seconds=1)
    assert w.control.get(fast).Resubmitted + w.control.get(slow).Resubmitted == 10
    assert w.control.get(fast).State == "done"


def test_a_pace_slower_than_one_order_in_a_hundred_seconds_is_refused() -> None:
    with pytest.raises(ValueError, match="rate"):
        RedriveRequest.from_body(b'{"rate": 5e-324, "reason": "x", "dry_run": false}')


def test_an_order_resubmitted_by_hand_while_in_hand_is_not_counted_as_its_own() -> None:
    w = World(failed=3)
    rid = w.start(rate=100)

    runner = w.runner("dies")
    runner.resubmit = lambda *a: (_ for _ in ()).throw(Crash("before any resubmit"))
    with pytest.raises(Crash):
        runner.run(9)
    w.operator.resubmit("o-00001", "by hand", False, "bo")
    w.clock.advance(seconds=30)
    w.runner("next").run(9)
    view = w.control.get(rid)
    assert (view.Resubmitted, view.Refused) == (2, 1), view
    assert "resubmitted meanwhile, not by this re-drive" in view.Refusals[0].Why


def test_an_order_resubmitted_and_failed_again_after_the_runners_look_is_not_resubmitted_again(
) -> None:
    """Between the runner's look at an order (still at the generation it picked) and its
    resubmit, an operator resubmits it and it fails again: the re-drive's resubmit, tied to the
    generation picked, is refused, and the order is resubmitted once, not twice."""
    w = World(failed=1)
    rid = w.start(rate=100)
    runner = w.runner()

    def meanwhile(order_id: str, reason: str, force: bool, by: str | None,
                  generation: int) -> object:
        w.operator.resubmit(order_id, "by hand", False, "bo")
        s = w.store.get_state(order_id)
        assert s is not None
        s.process_state, s.compensation = ProcessState.ERROR, CompensationState.DONE
        w.store.save(s)
        return w.resubmit(order_id, reason, force, by, generation)

    runner.resubmit = meanwhile
    runner.run(9)
    view = w.control.get(rid)
    assert (view.Resubmitted, view.Refused) == (0, 1), view
    assert "o-00000 was resubmitted meanwhile, not by this re-drive" in view.Refusals[0].Why
    s = w.store.get_state("o-00000")
    assert s is not None and s.generation == 1 and s.process_state is ProcessState.ERROR


def test_an_order_this_redrive_resubmitted_from_another_runner_meanwhile_is_counted_as_its_own(
) -> None:
    """Between the look and the resubmit, another runner of the same re-drive (whose claim ran
    out mid-resubmit) resubmits the order: refused here, it is counted resubmitted, as its
    history says, not refused."""
    w = World(failed=1)
    rid = w.start(rate=100)
    runner = w.runner()

    def meanwhile(order_id: str, reason: str, force: bool, by: str | None,
                  generation: int) -> object:
        w.operator.resubmit(order_id, reason, force, by)  # the other runner's
        return w.resubmit(order_id, reason, force, by, generation)

    runner.resubmit = meanwhile
    runner.run(9)
    view = w.control.get(rid)
    assert (view.Resubmitted, view.Refused) == (1, 0), view
    s = w.store.get_state("o-00000")
    assert s is not None and s.generation == 1


def test_an_order_still_being_undone_is_not_picked() -> None:
    w = World(failed=2)
    s = w.store.get_state("o-00000")
    assert s is not None
    s.compensation = CompensationState.RUNNING
    w.store.save(s)
    rid = w.start()
    w.runner().run(9)
    view = w.control.get(rid)
    assert (view.Resubmitted, view.Refused) == (1, 0)


def test_at_most_so_many_redrives_run_or_wait_at_once() -> None:
    from shared.domain.redrive import MAX_ACTIVE

    w = World()
    for _ in range(MAX_ACTIVE):
        w.start()
    with pytest.raises(RedriveRefused, match="cancel or finish one first"):
        w.start()


def test_one_redrives_trouble_holds_no_other_back() -> None:
    w = World(failed=4)
    broken = w.start(failed_step="hold")  # the older: run first, and its listing fails
    w.clock.advance(seconds=1)
    fine = w.start(failed_step="take")
    calls = {"n": 0}
    real = w.store.list_states

    def listing(*a: Any, **k: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the store answered nonsense")
        return real(*a, **k)

    w.store.list_states = listing  # type: ignore[method-assign]
    w.runner().run(9)
    assert w.control.get(fine).Resubmitted == 4
    assert w.control.get(broken).State == "running"
