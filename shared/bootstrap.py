"""The one place where real adapters are wired to the handlers, from the app's configuration
(its settings resolved with its workflows: shared/configuration.py)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from azure.core.exceptions import ResourceExistsError
from azure.data.tables import TableServiceClient
from azure.storage.queue import QueueServiceClient

from shared import bindings_compat
from shared.adapters.alerts import TableAlertStore
from shared.adapters.code_service import CodeServiceClient
from shared.adapters.limits import ServiceLimiter, TableLimits
from shared.adapters.pauses import CachedPauses, TablePauses
from shared.adapters.queues import StorageQueueSender
from shared.adapters.redrives import TableRedrives
from shared.adapters.rejections import TableRejectionStore
from shared.adapters.remote_service import RemoteServiceClient, http_client
from shared.adapters.state_store import TableOrderStore
from shared.adapters.storage import probe_options, queue_service, table_service
from shared.adapters.tick_log import TableTickLog
from shared.circuit_breaker import CircuitBreaker
from shared.clock import Clock, utc_now
from shared.configuration import Configuration, resolve
from shared.domain.state import RetryPolicy, exponential_backoff
from shared.domain.workflow import Registry, Workflow
from shared.handlers.agent import Agent, AgentRetryPolicy, RequestCheck, new_breaker
from shared.handlers.health import HealthProbe
from shared.handlers.intake import IntakeHandler
from shared.handlers.operator import Operator
from shared.handlers.pausing import PauseControl
from shared.handlers.redrive import RedriveRunner
from shared.handlers.redriving import RedriveControl
from shared.handlers.relay import EffectRelay
from shared.handlers.scheduler import Queues, Scheduler
from shared.handlers.simulated_provider import SimulatedProvider
from shared.handlers.simulated_service import Faults, SimulatedService
from shared.handlers.supervisor import Supervisor
from shared.settings import Settings, load_settings

log = logging.getLogger(__name__)

# How long one request for a service's limit may take (its record, on the call's way).
LIMIT_TIMEOUT_SECONDS = 2.0

# Each health check's connect and read timeout; the probe answers within 4 s in all.
PROBE_TIMEOUT_SECONDS = 2.0


@dataclass
class Container:
    config: Configuration
    settings: Settings
    workflows: Registry
    tables: TableServiceClient
    queues: QueueServiceClient
    store: TableOrderStore
    intake: IntakeHandler
    scheduler: Scheduler
    supervisor: Supervisor
    agents: dict[str, Agent]
    operator: Operator
    # Re-drives: an operator's (start, progress, pause, cancel) and the runner's.
    redrives: RedriveControl
    redriver: RedriveRunner
    simulator: SimulatedService
    # A provider-shaped API for code services to call locally (SimulatorsEnabled).
    provider: SimulatedProvider
    http: httpx.Client = field(repr=False)

    @property
    def workflow(self) -> Workflow:
        """The default workflow, at its latest version."""
        return self.workflows.get()

    def ensure_resources(self) -> None:
        """Create the tables and queues (local runs; in Azure the Bicep creates them)."""
        s = self.settings
        for name in (s.state_table, s.inflight_table, s.rejected_table, s.alerts_table,
                     s.simulator_table):
            with contextlib.suppress(ResourceExistsError):
                self.tables.create_table(name)
        for name in [*self.config.queues, *(s.status_queue for s in self.config.senders)]:
            with contextlib.suppress(ResourceExistsError):
                self.queues.create_queue(name)

    def close(self) -> None:
        self.http.close()


def health_probe(config: Configuration,
                 breakers: Mapping[str, CircuitBreaker] | None = None,
                 clock: Clock = utc_now) -> HealthProbe:
    """The state table and every queue the app reads, each read once with short timeouts; for
    an operator also the poison queues, the last Supervisor tick and the Agents' breakers."""
    settings = config.settings
    tables = table_service(settings, **probe_options(PROBE_TIMEOUT_SECONDS))
    queues = queue_service(settings, **probe_options(PROBE_TIMEOUT_SECONDS))
    state = tables.get_table_client(settings.state_table)
    ticks = TableTickLog(tables.get_table_client(settings.inflight_table))
    checks: dict[str, Callable[[], object]] = {
        "state_table": lambda: next(iter(state.query_entities(
            "RowKey eq 'state'", results_per_page=1, select=["PartitionKey"]).by_page()), None)}
    read = config.queues
    return HealthProbe(
        checks, queues={q: queues.get_queue_client(q).get_queue_properties for q in read},
        poison={q: queues.get_queue_client(f"{q}-poison").get_queue_properties for q in read},
        breakers=breakers, last_tick=lambda: ticks.read()[0].last_tick,
        tick_gap_seconds=settings.outage_gap_seconds, clock=clock)


def build(settings: Settings | Configuration, *, clock: Clock = utc_now,
          table_options: Mapping[str, Any] | None = None,
          queue_options: Mapping[str, Any] | None = None,
          workflows: Registry | None = None) -> Container:
    """Wire the app to run ``workflows`` (the registry configure() was given, when None) with
    these settings, or as a configuration already resolved says. The options go to the storage
    clients (local metering hooks)."""
    config = settings if isinstance(settings, Configuration) else resolve(
        settings, workflows or configured())
    settings, registry, services = config.settings, config.workflows, config.services
    log.info("workflows: %s", registry.describe())
    tables = table_service(settings, **(table_options or {}))
    queues = queue_service(settings, **(queue_options or {}))
    grace = timedelta(seconds=settings.pending_grace)
    # New index entries are filed within the shortest time a write can make an order due in,
    # so an order's later writes need no new one (due_index.py).
    store = TableOrderStore(tables.get_table_client(settings.state_table),
                            tables.get_table_client(settings.inflight_table), grace,
                            horizon=min([grace, *registry.budgets]))
    sender = StorageQueueSender(queues)
    alerts = TableAlertStore(tables.get_table_client(settings.alerts_table),
                             timedelta(days=settings.alert_retention_days))
    rejections = TableRejectionStore(tables.get_table_client(settings.rejected_table),
                                     timedelta(days=settings.rejected_retention_days))
    relay = EffectRelay(store=store, sender=sender, alerts=alerts, workflows=registry,
                        agent_queues={name: v.queue for name, v in services.items()},
                        scheduler_queue=settings.scheduler_queue, clock=clock)
    http = http_client()
    retry = AgentRetryPolicy(settings.agent_retry_base, settings.agent_retry_max,
                             settings.agent_call_timeout)
    key = (settings.remote_service_key.get_secret_value()
           if settings.remote_service_key else None)
    check = RequestCheck(store, registry, alerts)
    pause_store = TablePauses(tables.get_table_client(settings.inflight_table))
    pauses = CachedPauses(pause_store)
    breakers = {name: new_breaker(name, settings.breaker_failures, settings.breaker_reset,
                                  settings.breaker_window) for name in services}
    # A call to a limited service waits for these requests: short, tried twice at most.
    limits = TableLimits(table_service(settings, **{
        **(table_options or {}), **probe_options(LIMIT_TIMEOUT_SECONDS), "retry_total": 1,
    }).get_table_client(settings.inflight_table))
    code = registry.code_services
    agents = {
        name: Agent(
            name=name, client=(
                CodeServiceClient(code[name], dict(config.code_settings[name]))
                if name in code else RemoteServiceClient(v.url or "", http, key)),
            policy=retry, breaker=breakers[name], clock=clock, check=check, pauses=pauses,
            limiter=ServiceLimiter(name, config.limits[name], limits,
                                   now=lambda: clock().timestamp(),
                                   longest_call=settings.agent_call_timeout)
            if name in config.limits else None,
        )
        for name, v in services.items()
    }
    faults = Faults(settings.sim_latency_ms, settings.sim_transient_rate,
                    settings.sim_permanent_rate, settings.sim_hang_rate, settings.sim_hang_seconds)
    policy = RetryPolicy(
        failure_threshold=settings.failure_threshold,
        backoff=exponential_backoff(timedelta(seconds=settings.retry_backoff),
                                    timedelta(seconds=settings.retry_backoff_max)),
        pending_grace=timedelta(seconds=settings.pending_grace),
        compensation_threshold=settings.compensation_threshold,
        rescue_threshold=settings.rescue_threshold,
        outage_gap=timedelta(seconds=settings.outage_gap_seconds),
        max_recoveries_per_tick=settings.max_recoveries_per_tick,
    )
    scheduler = Scheduler(instance_id=settings.scheduler_instance_id, store=store, relay=relay,
                          workflows=registry, clock=clock,
                          queues=Queues(sender, settings.scheduler_queue,
                                        settings.responses_queue), pauses=pauses)
    operator = Operator(
        store=store, relay=relay, alerts=alerts, rejections=rejections,
        health=health_probe(config, breakers, clock),
        pending_grace=policy.pending_grace, clock=clock,
        customer_columns=registry.customer_columns,
        pauses=PauseControl(store=pause_store, services=registry.services,
                            workflows=registry.names, clock=clock))
    redrive_store = TableRedrives(tables.get_table_client(settings.inflight_table))
    return Container(
        config=config, settings=settings, workflows=registry, tables=tables, queues=queues,
        store=store,
        # Intake's start command goes to the Scheduler in the same invocation: the Service Bus
        # message, redelivered until intake returns, is what makes it durable (relay.py).
        intake=IntakeHandler(
            store=store, rejections=rejections, alerts=alerts,
            relay=relay, scheduler=scheduler, workflows=registry,
            reply_allowed=config.reply_queues.allow, clock=clock),
        scheduler=scheduler,
        supervisor=Supervisor(
            store=store, ticks=TableTickLog(tables.get_table_client(settings.inflight_table)),
            relay=relay, alerts=alerts, policy=policy, workflows=registry, clock=clock,
            pauses=pause_store),
        agents=agents,
        operator=operator,
        redrives=RedriveControl(store=redrive_store, orders=store, workflows=registry,
                                limits=config.limits, clock=clock),
        redriver=RedriveRunner(
            store=redrive_store, orders=store, workflows=registry, clock=clock, pauses=pauses,
            resubmit=lambda order_id, reason, force, by, generation: operator.resubmit(
                order_id, reason, force, by, generation)),
        simulator=SimulatedService(
            tables.get_table_client(settings.simulator_table), registry.operations, faults,
            clock),
        provider=SimulatedProvider(
            tables.get_table_client(settings.simulator_table), registry.code_services, faults,
            clock),
        http=http,
    )


_container: Container | None = None
_lock = threading.Lock()
_registry: Registry | None = None
_config: Configuration | None = None


def configure(workflows: Registry) -> None:
    """Hand the app its workflows (function_app.py does, before any function runs)."""
    global _registry
    _registry = workflows
    bindings_compat.install()  # before the worker converts a first message


def configured() -> Registry:
    if _registry is None:
        raise RuntimeError("no workflows: function_app.py hands its registry to "
                           "bootstrap.configure before anything runs")
    return _registry


def use(config: Configuration) -> None:
    """The configuration the app resolved at start-up (shared/functions/startup.py): the
    container is built from it, without reading the settings again."""
    global _config
    _config = config


def container() -> Container:
    """The process-wide container, built on first use from the app's configuration (or the
    app settings, where none was resolved)."""
    global _container
    with _lock:
        if _container is None:
            _container = build(_config if _config is not None else load_settings())
        return _container


def reset(replacement: Container | None = None) -> None:
    """Forget the current container and configuration (tests and the local host change
    settings between runs)."""
    global _container, _config
    with _lock:
        if _container is not None and _container is not replacement:
            _container.close()
        _container, _config = replacement, None
