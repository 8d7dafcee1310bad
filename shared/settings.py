"""Every app-wide setting the code reads, validated once at start-up (a service's own, whose
names the workflows give, are resolved in shared/configuration.py).

Names are the app-setting names (as in local.settings.json and the Bicep). A missing optional
setting takes its default; a setting that is present but wrong stops the app with an error that
names it.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from shared.platform import LOOPBACK_HOSTS, running_in_azure

# The well-known Azurite account; Core Tools users write UseDevelopmentStorage=true.
AZURITE_CONNECTION = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
    "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
    "QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;"
    "TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;"
)

QueueName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")]
TableName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9]{2,62}$")]
Seconds = Annotated[float, Field(gt=0)]
Rate = Annotated[float, Field(ge=0, le=1)]


# The share of fault-free orders whose whole trace is exported by default (docs/tracing.md).
DEFAULT_SAMPLE_RATIO = 0.05


class SettingsError(RuntimeError):
    """A setting is missing or wrong. The message names it."""


def _default_instance_id() -> str:
    return os.environ.get("WEBSITE_INSTANCE_ID", "")[:16] or f"{socket.gethostname()}-{os.getpid()}"


class Settings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    # Storage: a connection string locally, or the identity-based settings in Azure.
    storage_connection: str | None = Field(None, alias="AzureWebJobsStorage")
    storage_account_name: str | None = Field(None, alias="AzureWebJobsStorage__accountName")
    table_service_uri: str | None = Field(None, alias="AzureWebJobsStorage__tableServiceUri")
    queue_service_uri: str | None = Field(None, alias="AzureWebJobsStorage__queueServiceUri")
    storage_client_id: str | None = Field(None, alias="AzureWebJobsStorage__clientId")

    orders_queue: str = Field("orders", alias="OrdersQueueName", min_length=1)
    scheduler_queue: QueueName = Field("scheduler-commands", alias="SchedulerQueueName")
    responses_queue: QueueName = Field("agent-responses", alias="AgentResponsesQueueName")

    state_table: TableName = Field("OrderState", alias="StateTableName")
    inflight_table: TableName = Field("OrdersInFlight", alias="InFlightTableName")
    rejected_table: TableName = Field("RejectedOrders", alias="RejectedOrdersTableName")
    alerts_table: TableName = Field("OperatorAlerts", alias="OperatorAlertsTableName")
    simulator_table: TableName = Field("SimulatedEffects", alias="SimulatorTableName")

    # How long a rejected message's row is kept (RejectedOrders): senders' input, so bounded.
    rejected_retention_days: int = Field(30, alias="RejectedRetentionDays", ge=1, le=3650)
    alert_retention_days: int = Field(90, alias="AlertRetentionDays", ge=1, le=3650)
    supervisor_schedule: str = Field("*/30 * * * * *", alias="SupervisorSchedule")
    failure_threshold: int = Field(3, alias="FailureThreshold", ge=1, le=100)
    compensation_threshold: int = Field(10, alias="CompensationFailureThreshold", ge=1, le=1000)
    rescue_threshold: int = Field(5, alias="RescueThreshold", ge=1, le=1000)
    retry_backoff: Seconds = Field(5, alias="RetryBackoffSeconds")
    retry_backoff_max: Seconds = Field(300, alias="RetryBackoffMaxSeconds")
    pending_grace: Seconds = Field(60, alias="PendingGraceSeconds")
    # Longer than this between two completed Supervisor ticks is an outage. Unset: one and a
    # half times the schedule's interval (outage_gap_seconds), so that an outage that costs a
    # single tick is seen at any schedule.
    outage_gap: Seconds | None = Field(None, alias="OutageGapSeconds")
    max_recoveries_per_tick: int = Field(200, alias="SupervisorMaxRecoveriesPerTick", ge=1)
    step_budgets: str = Field("", alias="StepBudgetSeconds")
    # Prefixes of the queues an order's reply_to may name; empty: none. The app's own queues are
    # never among them, whatever this says (configuration.ReplyQueues).
    reply_allow_list: str = Field("", alias="ReplyQueueAllowList")
    # The senders the deployment declares (shared/domain/senders.py); empty: the default one.
    senders: str = Field("", alias="Senders")
    scheduler_instance_id: str = Field(
        default_factory=_default_instance_id, alias="SchedulerInstanceId", min_length=1
    )

    # Sent as x-functions-key on every remote call: the simulated services are function-level
    # HTTP functions (a demo deployment sets it to a key the Bicep makes for them).
    remote_service_key: SecretStr | None = Field(None, alias="RemoteServiceKey")
    agent_retry_base: Seconds = Field(0.2, alias="AgentRetryBaseSeconds")
    agent_retry_max: Seconds = Field(5, alias="AgentRetryMaxSeconds")
    agent_call_timeout: Seconds = Field(10, alias="AgentCallTimeoutSeconds")
    breaker_failures: int = Field(5, alias="CircuitBreakerFailures", ge=1)
    breaker_reset: Seconds = Field(30, alias="CircuitBreakerResetSeconds")
    breaker_window: Seconds = Field(20, alias="CircuitBreakerWindowSeconds")

    # The share of fault-free orders whose whole trace is exported (1: every order); an order in
    # trouble is kept from then on whatever this says (shared/sampling.py, OrderSampler).
    trace_sample_ratio: Rate = Field(DEFAULT_SAMPLE_RATIO, alias="OrderTraceSampleRatio")

    simulators_enabled: bool = Field(False, alias="SimulatorsEnabled")
    # Local runs only: the app roles of the principal a request without one is given (no
    # platform sign-in here). Refused in Azure (load_settings), where the platform signs in.
    operator_development_roles: str = Field("", alias="OperatorDevelopmentRoles")
    # Where the simulated services are served: each service's URL is <this>/<service> unless
    # its <Service>ServiceUrl says otherwise (a demo deployment sets it to its own host).
    simulator_base_url: str | None = Field(None, alias="SimulatorBaseUrl",
                                           pattern=r"^https?://\S+[^/]$")
    sim_latency_ms: int = Field(0, alias="SimLatencyMs", ge=0)
    sim_transient_rate: Rate = Field(0, alias="SimTransientErrorRate")
    sim_permanent_rate: Rate = Field(0, alias="SimPermanentErrorRate")
    sim_hang_rate: Rate = Field(0, alias="SimHangRate")
    sim_hang_seconds: Seconds = Field(120, alias="SimHangSeconds")

    @field_validator("supervisor_schedule")
    @classmethod
    def _six_fields(cls, v: str) -> str:
        if len(v.split()) != 6:
            raise ValueError("needs six NCRONTAB fields: second minute hour day month weekday")
        return v

    @field_validator("simulator_base_url")
    @classmethod
    def _simulators_over_https(cls, v: str | None) -> str | None:
        return None if v is None else secure_url(v)

    @field_validator("outage_gap", mode="before")
    @classmethod
    def _unset_when_empty(cls, v: object) -> object:
        return None if v == "" else v

    @field_validator("reply_allow_list")
    @classmethod
    def _prefixes(cls, v: str) -> str:
        reply_prefixes(v)
        return v

    @field_validator("step_budgets")
    @classmethod
    def _budget_pairs(cls, v: str) -> str:
        parse_budgets(v)
        return v

    # The settings as given: those of each service and code service, whose names only the
    # workflows know, are read from it when the two are resolved (shared/configuration.py).
    environ: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)

    @property
    def simulators(self) -> str | None:
        """Where the simulated services are: SimulatorBaseUrl, or the local host's own."""
        return self.simulator_base_url or (LOCAL_SIMULATORS if self.simulators_enabled
                                           else None)

    @property
    def outage_gap_seconds(self) -> float:
        if self.outage_gap is not None:
            return self.outage_gap
        return OUTAGE_GAP_TICKS * schedule_interval(self.supervisor_schedule)


    @property
    def effective_storage_connection(self) -> str | None:
        if self.storage_connection == "UseDevelopmentStorage=true":
            return AZURITE_CONNECTION
        return self.storage_connection


# The Functions host's own queues (blob triggers' receipts, its diagnostics).
HOST_QUEUES = "azure-webjobs-"


def reply_prefixes(allow_list: str) -> tuple[str, ...]:
    """ReplyQueueAllowList as prefixes. Earlier releases took glob patterns, and the shipped
    one was ``order-status-*``: a trailing ``*`` still reads as the prefix before it. Any other
    pattern, or one that matches every queue, is refused: a prefix must be meant."""
    out: list[str] = []
    for given in (p.strip() for p in allow_list.split(",")):
        if not given:
            continue
        stem = given.removesuffix("*")
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,61}", stem):
            raise ValueError(
                f"{given!r} is not a queue-name prefix: lower-case letters, digits and '-', "
                "starting with a letter or digit (a '*' only at the end, and it adds nothing)")
        out.append(stem)
    return tuple(out)


# Where the Agents find the simulated services when no <Service>ServiceUrl is set: this app's
# own, under the local host's default port.
LOCAL_SIMULATORS = "http://localhost:7071/api/sim"


def default_queue(service: str) -> str:
    """A service's request queue unless <Service>RequestsQueueName names another."""
    return f"{service}-requests"


def service_setting_names(service: str) -> tuple[str, str]:
    """The app settings of one service: <Service>ServiceUrl and <Service>RequestsQueueName."""
    stem = service[:1].upper() + service[1:]
    return f"{stem}ServiceUrl", f"{stem}RequestsQueueName"


def limit_setting_names(service: str) -> tuple[str, str]:
    """The app settings that set one service's limit: <Service>CallsAtOnce and
    <Service>CallsPerSecond (shared/domain/limits.py)."""
    stem = service[:1].upper() + service[1:]
    return f"{stem}CallsAtOnce", f"{stem}CallsPerSecond"


# The hosts a service URL may name over plain http: this machine (the local host's simulated
# services, the tests' stand-ins): LOOPBACK_HOSTS.


def secure_url(url: str) -> str:
    """``url`` if it is https, or http to this machine; else ValueError. Every remote call
    carries the order and RemoteServiceKey: in clear over a network, anyone on the path reads
    them and can answer in the service's place."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # a port that is no number raises here
    except ValueError:
        raise ValueError("is not a URL") from None
    if not host:
        raise ValueError("is not a URL: it names no host")
    if parts.scheme == "https" or (parts.scheme == "http" and host in LOOPBACK_HOSTS):
        return url
    if parts.scheme == "http":
        raise ValueError("must be https (plain http only to this machine: 127.0.0.1, "
                         "localhost, ::1): the order and RemoteServiceKey would cross the "
                         "network in clear")
    raise ValueError("must be an https URL")


class ServiceSettings(BaseModel):
    model_config = ConfigDict(frozen=True)
    # None: not given (a code service needs none).
    url: str | None
    queue: QueueName

    @field_validator("url")
    @classmethod
    def _over_https(cls, v: str | None) -> str | None:
        return None if v is None else secure_url(v)


# Completed ticks this many intervals apart mean that at least one tick did not complete.
OUTAGE_GAP_TICKS = 1.5


def schedule_interval(schedule: str) -> float:
    """Seconds between two runs of a six-field NCRONTAB schedule, for the regular forms a
    Supervisor is given (every N seconds, minutes or hours; or at a fixed second each minute, a
    fixed minute each hour); raises ValueError for the rest, whose outage gap must be set."""
    fields = schedule.split()
    if len(fields) != 6:
        raise ValueError("needs six NCRONTAB fields: second minute hour day month weekday")
    if fields[3:] != ["*", "*", "*"]:
        raise ValueError("not every day: set OutageGapSeconds")
    units = (1, 60, 3600)
    for i, field in enumerate(fields[:3]):
        rest = fields[i + 1:3]
        if field.startswith("*/") and field[2:].isdigit() and all(f == "*" for f in rest):
            return int(field[2:]) * units[i]
        if field == "*" and all(f == "*" for f in rest):
            return units[i]
        if not field.isdigit():
            break
        if all(f == "*" for f in rest):
            return units[i + 1] if i < 2 else 86400
    raise ValueError("not a regular interval: set OutageGapSeconds")


def parse_budgets(v: str) -> dict[str, timedelta]:
    budgets: dict[str, timedelta] = {}
    for pair in filter(None, (p.strip() for p in v.split(","))):
        name, sep, seconds = pair.partition("=")
        try:
            value = float(seconds)
        except ValueError:
            value = -1
        if not sep or value <= 0:
            raise ValueError(f"expected step=seconds pairs, got {pair!r}")
        budgets[name.strip()] = timedelta(seconds=value)
    return budgets


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    env = dict(os.environ if environ is None else environ)
    try:
        settings = Settings.model_validate({**env, "environ": env})
    except ValidationError as e:
        problems = "; ".join(
            f"{err['loc'][0] if err['loc'] else '?'}={env.get(str(err['loc'][0]), '<missing>')!r}: "
            f"{err['msg']}"
            for err in e.errors()
        )
        raise SettingsError(f"invalid app settings: {problems}") from None
    if not (settings.storage_connection or settings.storage_account_name
            or (settings.table_service_uri and settings.queue_service_uri)):
        raise SettingsError(
            "no storage configured: set AzureWebJobsStorage (a connection string) or "
            "AzureWebJobsStorage__accountName (managed identity)"
        )
    if settings.outage_gap is None:
        try:
            schedule_interval(settings.supervisor_schedule)
        except ValueError as e:
            raise SettingsError(f"SupervisorSchedule={settings.supervisor_schedule!r}: {e}"
                                ) from None
    if settings.operator_development_roles.strip() and running_in_azure(env):
        raise SettingsError(
            "OperatorDevelopmentRoles is set, and this app runs in Azure: it would give every "
            "caller those operator roles; remove it (operators sign in through the platform)")
    if settings.retry_backoff_max < settings.retry_backoff:
        raise SettingsError("RetryBackoffMaxSeconds must not be below RetryBackoffSeconds")
    if settings.breaker_window < settings.agent_call_timeout:
        # A hung call is judged beside the calls begun with it only if they share the window.
        raise SettingsError(
            "CircuitBreakerWindowSeconds must not be below AgentCallTimeoutSeconds")
    return settings


