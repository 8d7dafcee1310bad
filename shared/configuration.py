"""The app's settings resolved with its workflows, once, at the composition root: each service's
URL and queue, each code service's settings, the step budgets, the queues an order may name for
its status, each service's limit. Everything built from settings is handed this, and nothing
reads settings again."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from shared.domain import senders as sending
from shared.domain.limits import Limit
from shared.domain.senders import Sender
from shared.domain.services import CodeService
from shared.domain.workflow import Registry
from shared.settings import (
    HOST_QUEUES,
    ServiceSettings,
    Settings,
    SettingsError,
    default_queue,
    limit_setting_names,
    parse_budgets,
    reply_prefixes,
    service_setting_names,
)


@dataclass(frozen=True)
class ReplyQueues:
    """The queues an order's reply_to may name: one under a ReplyQueueAllowList prefix, and
    never one the app itself reads (its commands, replies and every service's requests, their
    poison queues, the host's own): a status update put there would be taken for the app's own
    message; nor a declared sender's status queue, which only that sender's orders reach."""
    prefixes: tuple[str, ...]
    own: frozenset[str]

    def allow(self, queue: str) -> bool:
        return (queue not in self.own and not queue.startswith(HOST_QUEUES)
                and any(queue.startswith(p) for p in self.prefixes))


@dataclass(frozen=True)
class Configuration:
    settings: Settings
    # The workflows, with the step budgets the settings give.
    workflows: Registry
    services: Mapping[str, ServiceSettings]
    # The settings each code service declares, as given (or its local value where the
    # simulators are).
    code_settings: Mapping[str, Mapping[str, str]]
    reply_queues: ReplyQueues
    # The declared senders, each with a queue of its own (empty: the default sender only).
    senders: tuple[Sender, ...] = ()
    # Each limited service's limit: as declared, or as its settings give it.
    limits: Mapping[str, Limit] = field(default_factory=dict)

    @property
    def queues(self) -> list[str]:
        """Every queue the app reads: the Scheduler's two and each service's requests."""
        s = self.settings
        return [s.scheduler_queue, s.responses_queue, *(v.queue for v in self.services.values())]


def resolve(settings: Settings, workflows: Registry) -> Configuration:
    """Every service the workflows call must have its settings: an HTTP service its URL, a code
    service the settings it declares; every one missing is named at once, as is a wrong one."""
    services = _services(settings, workflows.services)
    code = workflows.code_services
    given = {name: _code_settings(settings, service) for name, service in code.items()}
    missing = [f"{service_setting_names(name)[0]} (the URL of the {name} service, or set "
               "SimulatorBaseUrl)"
               for name, v in services.items() if v.url is None and name not in code]
    for name, service in code.items():
        missing += [f"{s} (read by the {name} service's code)"
                    for s in service.settings if s not in given[name]]
    if missing:
        raise SettingsError("invalid app settings: not set: " + "; ".join(missing))
    try:
        budgeted = workflows.with_budgets(parse_budgets(settings.step_budgets))
    except ValueError as e:
        raise SettingsError(f"StepBudgetSeconds={settings.step_budgets!r}: {e}") from None
    own = {settings.scheduler_queue, settings.responses_queue,
           *(s.queue for s in services.values())}
    try:
        senders = sending.parse(settings.senders)
    except ValueError as e:
        raise SettingsError(f"Senders={settings.senders!r}: {e}") from None
    clash = [s for s in senders if s.orders_queue == settings.orders_queue]
    if clash:
        raise SettingsError(f"Senders={settings.senders!r}: OrdersQueueName "
                            f"{settings.orders_queue!r} is {clash[0].name}'s queue; the default "
                            "sender's queue must be another")
    taken = sorted(own & {s.status_queue for s in senders})
    if taken:
        raise SettingsError(f"Senders={settings.senders!r}: the status queue {taken[0]!r} is "
                            "one the app reads")
    return Configuration(
        settings=settings, workflows=budgeted, services=services, code_settings=given,
        limits=_limits(settings, workflows),
        reply_queues=ReplyQueues(reply_prefixes(settings.reply_allow_list), frozenset(
            own | {f"{q}-poison" for q in own} | {s.status_queue for s in senders})),
        senders=senders)


def _services(settings: Settings, names: list[str]) -> dict[str, ServiceSettings]:
    """Each service's settings, by convention (service_setting_names). Without a URL of its
    own, a service is the simulated one, where simulators are: the local host's, or the ones
    at SimulatorBaseUrl. A code service needs none (resolve names what each kind is missing)."""
    out: dict[str, ServiceSettings] = {}
    simulators = settings.simulators
    for name in names:
        url_key, queue_key = service_setting_names(name)
        given = {"url": settings.environ.get(
                     url_key, f"{simulators}/{name}" if simulators else None),
                 "queue": settings.environ.get(queue_key, default_queue(name))}
        try:
            out[name] = ServiceSettings.model_validate(given)
        except ValidationError as e:
            keys = {"url": url_key, "queue": queue_key}
            raise SettingsError("invalid app settings: " + "; ".join(
                f"{keys[str(err['loc'][0])]}={given[str(err['loc'][0])]!r}: {err['msg']}"
                for err in e.errors())) from None
    return out


# A limit's settings: plain ASCII digits (int() and float() take "1_0" and other scripts').
AT_ONCE = re.compile(r"[0-9]{1,4}")
PER_SECOND = re.compile(r"[0-9]{1,4}(\.[0-9]{1,6})?")


def _limits(settings: Settings, workflows: Registry) -> dict[str, Limit]:
    """Each service's limit: as declared, with either number replaced by its setting
    (<Service>CallsAtOnce, <Service>CallsPerSecond) when one is given, as when a provider
    raises the app's quota; a service declaring none gets one from its settings."""
    declared = workflows.limits
    out: dict[str, Limit] = {}
    for name in workflows.services:
        limit = declared.get(name)
        at_once_key, per_second_key = limit_setting_names(name)
        at_once = settings.environ.get(at_once_key, "").strip()
        per_second = settings.environ.get(per_second_key, "").strip()
        if not at_once and not per_second:
            if limit is not None:
                out[name] = limit
            continue
        try:
            if (at_once and not AT_ONCE.fullmatch(at_once)) or (
                    per_second and not PER_SECOND.fullmatch(per_second)):
                raise ValueError("each is a number written in digits (calls a second may have "
                                 "a decimal point: 2.5)")
            out[name] = Limit(
                at_once=int(at_once) if at_once else (limit.at_once if limit else None),
                per_second=float(per_second) if per_second else (
                    limit.per_second if limit else None))
        except ValueError as e:
            raise SettingsError(f"invalid app settings: {at_once_key}={at_once!r}, "
                                f"{per_second_key}={per_second!r}: {e}") from None
    return out


def _code_settings(settings: Settings, service: CodeService) -> dict[str, str]:
    """The settings a code service declares, as given: a setting left unset where the
    simulators are takes the service's local value."""
    simulators = settings.simulators
    out: dict[str, str] = {}
    for name in service.settings:
        value = settings.environ.get(name)
        if value is None and simulators is not None and name in service.local:
            value = _local_value(service.local[name], simulators, settings.environ)
        if value:
            out[name] = value
    return out


def _local_value(template: str, simulators: str, environ: Mapping[str, str]) -> str | None:
    """A code service's local value: "{simulators}" is where the simulated services are;
    "{Name}" the app setting Name (None when it is unset)."""
    out = template.replace("{simulators}", simulators)
    for name in re.findall(r"\{([A-Za-z][A-Za-z0-9_]*)\}", out):
        if name not in environ:
            return None
        out = out.replace(f"{{{name}}}", environ[name])
    return out
