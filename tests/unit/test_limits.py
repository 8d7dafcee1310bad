"""A service's limit: its declaration, the settings that change it, and the Agent that honours
it (a grant before each call, its lease given back after, a 429 slowing every instance). The
limit across instances is searched in tests/model/test_limits.py; the record on Azurite is held
to the fake's behaviour in tests/integration/test_store_contract.py."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest

from shared.adapters.limits import NoSlot, ServiceLimiter
from shared.adapters.remote_service import PermanentServiceError, TransientServiceError
from shared.circuit_breaker import CircuitBreaker
from shared.configuration import resolve
from shared.domain.limits import Lease, Limit, LimitState
from shared.domain.pauses import Pause, PauseKind, Pauses, Target
from shared.domain.services import CodeService, HttpService
from shared.domain.workflow import Registry, Workflow
from shared.handlers.agent import Agent, AgentRetryPolicy, RequestCheck
from shared.settings import Settings, SettingsError, load_settings
from tests.conftest import FakeClock
from tests.fakes import FakeAlertStore, FakeLimits, FakeOrderStore, FakePauses, in_flight
from tests.unit.test_agent import Script, request
from tests.workflow import FLOW
from tests.workflow import Thing as Order


@pytest.mark.parametrize("limit", [
    dict(), dict(at_once=0), dict(at_once=501), dict(at_once=2.5), dict(at_once=True),
    dict(per_second=0), dict(per_second=-1), dict(per_second=float("inf")),
    dict(per_second=float("nan")), dict(per_second=1001), dict(per_second="20"),
])
def test_a_limit_that_cannot_work_is_refused_at_declaration(limit: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"limit needs|at_once|per_second"):
        Limit(**limit)


def test_a_service_is_declared_once_however_many_workflows_call_it() -> None:
    beta = HttpService("beta", limit=Limit(per_second=5))
    one = Workflow("one", FLOW.steps, message=Order, services=(beta,))
    two = Workflow("two", FLOW.steps, message=Order,
                   services=(HttpService("beta", limit=Limit(per_second=9)),))
    with pytest.raises(ValueError, match="declared twice, differently"):
        Registry.of([one, two], default="one")
    assert Registry.of([one, Workflow("two", FLOW.steps, message=Order, services=(beta,))],
                       default="one").limits == {"beta": Limit(per_second=5)}
    with pytest.raises(ValueError, match="no step calls"):
        Workflow("one", FLOW.steps, message=Order, services=(HttpService("delta"),))


def test_code_services_take_a_limit_too() -> None:
    code = CodeService("beta", {"take": lambda c: {}, "give_back": lambda c: {}},
                       limit=Limit(at_once=3))
    flow = Workflow("one", FLOW.steps, message=Order, services=(code,))
    assert Registry.of([flow]).limits == {"beta": Limit(at_once=3)}


def _settings(**environ: str) -> Settings:
    return load_settings({"SimulatorBaseUrl": "http://127.0.0.1:7071/api/sim",
                          "AzureWebJobsStorage": "UseDevelopmentStorage=true", **environ})


def test_settings_change_a_declared_limit_or_give_one() -> None:
    flow = Workflow("one", FLOW.steps, message=Order,
                    services=(HttpService("beta", limit=Limit(at_once=4, per_second=10)),))
    registry = Registry.of([flow])
    assert resolve(_settings(), registry).limits == {"beta": Limit(4, 10)}
    assert resolve(_settings(BetaCallsPerSecond="20"), registry).limits == {
        "beta": Limit(4, 20)}
    undeclared = Registry.of([FLOW])
    assert resolve(_settings(), undeclared).limits == {}
    assert resolve(_settings(BetaCallsAtOnce="2"), undeclared).limits == {
        "beta": Limit(at_once=2)}
    for bad in ({"BetaCallsAtOnce": "many"}, {"BetaCallsPerSecond": "0"}):
        with pytest.raises(SettingsError, match="BetaCallsAtOnce") as e:
            resolve(_settings(**bad), undeclared)
        assert "Traceback" not in str(e.value)


def limiter_on(clock: FakeClock, store: FakeLimits, limit: Limit,
               **kw: Any) -> ServiceLimiter:
    """An instance's limiter on the test's clock (it sleeps by moving it), giving leases back
    at once, in the caller's thread."""
    return ServiceLimiter("beta", limit, store, now=lambda: clock.now.timestamp(),
                          sleep=lambda s: clock.advance(seconds=s),
                          background=lambda release: release(), **kw)


def limited_agent(clock: FakeClock, script: Script, store: FakeLimits, limit: Limit,
                  instance: str = "a") -> tuple[Agent, ServiceLimiter]:
    orders = FakeOrderStore()
    in_flight(orders, "o-1", "take", clock.now)
    limiter = limiter_on(clock, store, limit, instance=instance)
    return Agent(name="beta", client=script,  # type: ignore[arg-type]
                 policy=AgentRetryPolicy(0.1, 1, 5),
                 breaker=CircuitBreaker("beta", 100, 1), clock=clock,
                 check=RequestCheck(orders, Registry.of([FLOW]), FakeAlertStore()),
                 sleep=lambda s: clock.advance(seconds=s), limiter=limiter), limiter


def test_every_call_takes_a_grant_and_gives_its_lease_back_whatever_the_answer() -> None:
    clock = FakeClock()
    store = FakeLimits()
    script = Script(clock, TransientServiceError("503"), PermanentServiceError("no", 400))
    agent, _ = limited_agent(clock, script, store, Limit(at_once=1))
    reply = agent.handle(request(clock))
    assert reply is not None and reply.outcome == "permanent_error"
    assert len(script.calls) == 2
    state, _ = store.records["beta"]
    assert state.leases == ()  # both calls gave theirs back: the next call is not kept waiting
    assert store.writes == 4  # a grant and a give-back a call


def test_a_call_that_gets_no_grant_in_its_time_is_not_made_and_not_answered() -> None:
    clock = FakeClock()
    store = FakeLimits()
    other = limiter_on(clock, store, Limit(at_once=1), instance="b")
    other.acquire(clock.now.timestamp() + 60, 60)  # another instance's call runs a minute
    script = Script(clock, {"status": "applied"})
    agent, _ = limited_agent(clock, script, store, Limit(at_once=1))
    assert agent.handle(request(clock, budget=30)) is None
    assert script.calls == []


def test_a_429_slows_every_instance_not_only_the_call_that_got_it() -> None:
    clock = FakeClock()
    store = FakeLimits()
    limit = Limit(per_second=100)
    script = Script(clock, TransientServiceError("HTTP 429", busy=True), {"status": "applied"})
    agent, _ = limited_agent(clock, script, store, limit)
    asked = clock.now
    reply = agent.handle(request(clock))
    assert reply is not None and reply.outcome == "ok"
    other = limiter_on(clock, store, limit, instance="b")
    # The other instance's next call, asked at the 429, starts no sooner than a second after.
    clock.now = asked
    got = other.acquire(asked.timestamp() + 30, 5)
    assert got.start >= (asked + timedelta(seconds=1)).timestamp()
    assert store.records["beta"][0].slow_reason == "HTTP 429"


def test_a_busy_answer_with_retry_after_slows_every_instance_that_long() -> None:
    clock = FakeClock()
    store = FakeLimits()
    script = Script(clock, TransientServiceError("HTTP 503", retry_after=12),
                    {"status": "applied"})
    agent, _ = limited_agent(clock, script, store, Limit(at_once=5))
    asked = clock.now.timestamp()
    assert agent.handle(request(clock)) is not None
    assert script.calls[1][0] >= 12
    assert store.records["beta"][0].slow_until >= asked + 12


def test_a_pause_that_comes_while_a_call_waits_for_its_grant_stops_it() -> None:
    clock = FakeClock()
    store = FakeLimits()
    other = limiter_on(clock, store, Limit(at_once=1), instance="b")
    other.acquire(clock.now.timestamp() + 60, 20)  # holds the one slot for 20 s
    script = Script(clock, {"status": "applied"})
    agent, _ = limited_agent(clock, script, store, Limit(at_once=1))
    pauses = FakePauses()
    paused_at = clock.now + timedelta(seconds=5)

    def current() -> Pauses:
        if clock.now >= paused_at and not pauses.records:
            target = Target(PauseKind.SERVICE, "beta")
            pauses.write(Pause(target).pause(clock.now, "ops", "incident"), None)
        return pauses.read_all()

    agent._pauses = type("Reader", (), {"current": staticmethod(current)})()
    assert agent.handle(request(clock, budget=30)) is None
    assert script.calls == [] and clock.now < paused_at + timedelta(seconds=1)
    assert store.records["beta"][0].leases == other._state.leases  # type: ignore[union-attr]


def test_a_call_that_cannot_start_in_time_is_told_at_once_not_left_polling() -> None:
    clock = FakeClock()
    store = FakeLimits()
    limiter = limiter_on(clock, store, Limit(per_second=5))
    limiter.slow(50, "HTTP 429")
    asked = clock.now
    with pytest.raises(NoSlot):
        limiter.acquire(clock.now.timestamp() + 30, 5)
    assert clock.now == asked and store.reads <= 1


def test_a_record_no_sane_instance_could_have_written_holds_nothing_back() -> None:
    """A host whose clock ran an hour ahead, or a rate since raised, or a lease for ever."""
    clock = FakeClock()
    now = clock.now.timestamp()
    store = FakeLimits()
    store.write("beta", LimitState(next_start=now + 3600, slow_until=now + 3600,
                                   leases=(Lease("x.1", float("inf")),
                                           Lease("x.2", now + 3600))), None)
    limiter = limiter_on(clock, store, Limit(at_once=2, per_second=20), longest_call=10)
    with pytest.raises(NoSlot):  # the slow-down is held to a minute: this call's 30 s no
        limiter.acquire(now + 30, 5)
    clock.advance(seconds=61)
    got = limiter.acquire(clock.now.timestamp() + 30, 5)
    assert got.start <= clock.now.timestamp() + 1


def test_a_grant_whose_write_came_back_late_is_given_back_and_asked_again() -> None:
    clock = FakeClock()
    slow_writes = iter([True])

    def fault(op: str) -> None:
        if op == "limits.write" and next(slow_writes, False):
            clock.advance(seconds=3)  # the write took 3 s to answer

    store = FakeLimits(fault=fault)
    limiter = limiter_on(clock, store, Limit(at_once=1, per_second=10))
    asked = clock.now.timestamp()
    got = limiter.acquire(asked + 30, 5)
    assert got.start >= asked + 3  # the late grant was not the one used
    assert [lease.id for lease in store.records["beta"][0].leases] == [got.lease]


def test_a_call_let_begin_late_holds_the_next_one_back_by_the_spacing() -> None:
    """A grant is a start time; a call begins when its thread gets to it. One that got there
    late (a slow write, a thread woken late) would begin next to the one granted after it: the
    instance lets each begin no sooner than the spacing after its previous one began."""
    clock = FakeClock()
    late = iter([0.04])

    def fault(op: str) -> None:
        if op == "limits.write":
            clock.advance(seconds=next(late, 0.0))  # the first grant's write answered 40 ms on

    limiter = limiter_on(clock, FakeLimits(fault=fault), Limit(per_second=20))
    deadline = clock.now.timestamp() + 30
    began = []
    for _ in range(3):
        got = limiter.acquire(deadline, 5)
        began.append(clock.now.timestamp())
        assert began[-1] >= got.start
    # Granted 50 ms apart; the first began 40 ms after its grant, the second 50 ms after it.
    assert [round(b - a, 3) for a, b in itertools.pairwise(began)] == [0.05, 0.05]


def test_a_half_open_breaker_with_its_trial_running_costs_no_grant() -> None:
    clock = FakeClock()
    store = FakeLimits()
    script = Script(clock, {"status": "applied"})
    agent, _ = limited_agent(clock, script, store, Limit(per_second=100))
    breaker = CircuitBreaker("beta", 1, 0.0, window_seconds=20)
    breaker._opened_at, breaker._trial_running = 0.0, True
    agent._breaker = breaker
    assert agent.handle(request(clock, budget=2)) is None
    assert script.calls == [] and store.writes == 0


@pytest.mark.parametrize("value", ["1_0", "\uff10\uff13", "1e3", "-2", " "])
def test_a_limit_setting_is_plain_digits(value: str) -> None:
    undeclared = Registry.of([FLOW])
    if not value.strip():
        assert resolve(_settings(BetaCallsAtOnce=value), undeclared).limits == {}
        return
    with pytest.raises(SettingsError, match="BetaCallsAtOnce"):
        resolve(_settings(BetaCallsAtOnce=value), undeclared)
