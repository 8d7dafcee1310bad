"""A workflow is a declaration: its steps in order, each step's service, the operation it asks
for, the operation that undoes it (``None`` when nothing can be undone) and how long one attempt
may take. The engine only walks it; it never imports one (the shipped ones live in
``shared/workflows``, and the composition root is handed a ``Registry`` of them).

A declaration has a version. An order keeps the version it started with (on its record), so
inserting, removing or reordering a step never changes the path of an order already under way:
register the new version beside the old one, and drop the old one only once no order uses it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Protocol

from shared.domain import budget as budgets
from shared.domain.declarations import DeclarationError
from shared.domain.limits import Limit
from shared.domain.services import CodeService, HttpService, Input
from shared.domain.step_policy import StepRetry
from shared.domain.workflow_message import (
    WORKFLOW_NAME_PATTERN,
    Envelope,
    InvalidOrder,
    WorkflowMessage,
    refuse_duplicate_keys,
    validate_as,
)


class Record(Protocol):
    """What of an order's state record says which workflow it follows (OrderState)."""

    @property
    def order_id(self) -> str: ...
    @property
    def workflow(self) -> str | None: ...
    @property
    def workflow_version(self) -> int: ...
    @property
    def schema_version(self) -> int | None: ...
    @property
    def from_newer_release(self) -> bool: ...


@dataclass(frozen=True)
class Step:
    name: str
    service: str
    operation: str
    compensation: str | None
    budget: timedelta
    # What its service receives: the order's fields named here, or a function of the order
    # and the earlier steps' results; None, the whole order.
    input: Input = field(default=None, kw_only=True)
    # The most its result may take on the record (UTF-8 bytes of its JSON); None, an equal
    # share of budget.RESULTS among the workflow's steps.
    result_budget: int | None = field(default=None, kw_only=True)
    # How its failures are handled: its own attempts, backoff and answers worth asking again;
    # by default the app's (FailureThreshold, RetryBackoffSeconds) and the contract's.
    retry: StepRetry = field(default_factory=StepRetry, kw_only=True)

    def operation_for(self, action: str) -> str:
        if action == "undo":
            if self.compensation is None:
                raise ValueError(f"step {self.name!r} has no compensation")
            return self.compensation
        return self.operation


# A service's name is the stem of its settings and functions (<Service>ServiceUrl,
# <service>_agent): a lower-case identifier.
SERVICE_NAME = re.compile(r"^[a-z][a-z0-9]{1,30}$")


def agent_function(service: str) -> str:
    """The name of the Agent function that serves ``service`` (one per service)."""
    return f"{service}_agent"


@dataclass(frozen=True)
class Workflow:
    name: str
    steps: tuple[Step, ...]
    version: int = 1
    # What its messages hold: a model on WorkflowMessage (its id, workflow and reply queue),
    # adding the workflow's own fields. Intake validates each message with it.
    message: type[WorkflowMessage] = field(kw_only=True)
    # The services among its steps' that are the user's own code, and those speaking the HTTP
    # contract (docs/contracts.md) declared for more than their name (a limit); a service
    # only named by a step speaks HTTP, with no limit.
    services: tuple[CodeService | HttpService, ...] = field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        if (problem := self._problem()) is not None:
            raise DeclarationError(f"workflow {self.name!r} v{self.version}: {problem}")

    def _problem(self) -> str | None:
        """What makes this declaration one the app cannot run, in the words of the docs."""
        names = [s.name for s in self.steps]
        if not names:
            return "a workflow needs at least one step"
        if len(set(names)) != len(names):
            return f"step names must be unique: {names}"
        bad = sorted({s.service for s in self.steps if not SERVICE_NAME.match(s.service)})
        if bad:
            return (f"a service's name is 2 to 31 lower-case letters and digits, beginning with "
                    f"a letter (it names the service's settings and functions): {bad}")
        if not re.match(WORKFLOW_NAME_PATTERN, self.name):
            return ("a workflow's name is 1 to 63 lower-case letters, digits and hyphens, "
                    "beginning with a letter")
        if self.version < 1:
            return "a workflow's version starts at 1"
        for s in self.steps:
            if s.input is not None and not (callable(s.input) or (
                    isinstance(s.input, tuple) and all(isinstance(f, str) for f in s.input))):
                return (f"step {s.name!r}: input is a tuple of the order's field names or a "
                        "function of the order and the earlier results")
        if sum(self.result_budget(s.name) for s in self.steps) > budgets.RESULTS:
            return (f"the steps' result budgets add up to more than a record keeps "
                    f"({budgets.RESULTS:,} bytes)")
        declared = {c.name: c for c in self.services}
        if len(declared) != len(self.services):
            return "a service is declared twice"
        unused = sorted(set(declared) - self.agents)
        if unused:
            return f"services declared that no step calls: {unused}"
        code = {c.name: c for c in self.services if isinstance(c, CodeService)}
        for s in self.steps:
            service = code.get(s.service)
            missing = [op for op in (s.operation, s.compensation)
                       if service is not None and op is not None and op not in service.operations]
            if missing:
                return f"step {s.name!r}: the {s.service} code service has no operation " \
                       f"{missing[0]!r}"
        return None

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def agents(self) -> frozenset[str]:
        return frozenset(s.service for s in self.steps)

    def result_budget(self, step: str) -> int:
        """The most the step's result may take on the record (UTF-8 bytes of its JSON)."""
        declared = self.step(step).result_budget
        return declared if declared is not None else budgets.RESULTS // len(self.steps)

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}"

    def with_budgets(self, budgets: dict[str, timedelta]) -> Workflow:
        unknown = set(budgets) - {s.name for s in self.steps}
        if unknown:
            raise ValueError(f"budget given for unknown steps: {sorted(unknown)}")
        return replace(
            self, steps=tuple(replace(s, budget=budgets.get(s.name, s.budget)) for s in self.steps)
        )


class UnknownWorkflow(LookupError):
    """An order names a workflow, or a version of one, that this release does not have: a
    newer release's order during a rolling deployment (``newer``), or a workflow no release has
    any more."""

    def __init__(self, message: str, *, newer: bool = False) -> None:
        super().__init__(message)
        self.newer = newer


@dataclass(frozen=True)
class Registry:
    """Every workflow the app runs, each in every version an order may still use."""

    workflows: tuple[Workflow, ...]
    default: str

    def __post_init__(self) -> None:
        keys = [(w.name, w.version) for w in self.workflows]
        if len(set(keys)) != len(keys):
            raise DeclarationError(f"a workflow version is registered twice: {sorted(keys)}")
        if self.default not in {w.name for w in self.workflows}:
            raise DeclarationError(f"the default workflow {self.default!r} is not registered")
        declared: dict[str, CodeService | HttpService] = {}
        for w in self.workflows:
            for c in w.services:
                if declared.setdefault(c.name, c) is not c and declared[c.name] != c:
                    raise DeclarationError(f"service {c.name!r} is declared twice, differently: "
                                           "declare it once and name the one declaration in each "
                                           "workflow")
        code = {n: c for n, c in declared.items() if isinstance(c, CodeService)}
        # A service declared as code by one workflow is code for every workflow that calls it
        # (one Agent a service): each of their steps' operations must be among its own.
        for w in self.workflows:
            for st in w.steps:
                service = code.get(st.service)
                missing = [op for op in (st.operation, st.compensation)
                           if service is not None and op is not None
                           and op not in service.operations]
                if missing:
                    raise DeclarationError(f"{w.label} step {st.name!r}: the {st.service} code "
                                           f"service has no operation {missing[0]!r}")

    @classmethod
    def of(cls, workflows: Iterable[Workflow], default: str | None = None) -> Registry:
        ws = tuple(workflows)
        return cls(ws, default if default is not None else ws[0].name)

    def get(self, name: str | None = None, version: int | None = None) -> Workflow:
        """The named workflow (the default when None) at ``version`` (the latest when None)."""
        name = name or self.default
        versions = [w for w in self.workflows if w.name == name]
        if not versions:
            raise UnknownWorkflow(f"no workflow {name!r} (this app runs {self.names})")
        if version is None:
            return max(versions, key=lambda w: w.version)
        for w in versions:
            if w.version == version:
                return w
        known = sorted(w.version for w in versions)
        raise UnknownWorkflow(f"workflow {name!r} has no version {version} here (it has "
                              f"{known})", newer=version > known[-1])

    def of_record(self, state: Record) -> Workflow:
        """The workflow an order's record follows, at the version it started with. A record a
        newer release wrote (a newer schema) is that release's to run, as is a version of a
        workflow this release does not have: UnknownWorkflow, ``newer``."""
        if state.from_newer_release:
            raise UnknownWorkflow(f"order {state.order_id}'s record is of schema version "
                                  f"{state.schema_version}, newer than this release's",
                                  newer=True)
        return self.get(state.workflow, state.workflow_version)

    def parse(self, body: bytes | str) -> WorkflowMessage:
        """A message as the model of the workflow it names reads it (the default workflow's
        when it names none); raise InvalidOrder with the reason, a workflow the app does not
        run among them."""
        refuse_duplicate_keys(body)
        name = validate_as(Envelope, body).workflow
        try:
            workflow = self.get(name)
        except UnknownWorkflow as e:
            raise InvalidOrder(f"workflow: {e}") from None
        try:
            return validate_as(workflow.message, body)
        except InvalidOrder as e:
            # Which model it was read by, and why: an order of another workflow that forgot to
            # name it reads as the default's, and its reason would otherwise not say so.
            read_as = (f"read as workflow {workflow.name!r}" if name is not None else
                       f"read as workflow {workflow.name!r}, the default (it names no "
                       "\"workflow\")")
            raise InvalidOrder(f"{e} ({read_as})") from None

    @property
    def customer_columns(self) -> list[str]:
        """The stored order columns that name a customer, of every workflow's message model."""
        return sorted({c for w in self.workflows if (c := w.message.customer_column)})

    def describe(self) -> str:
        """What this app runs, for its start-up log: each workflow with the versions it keeps."""
        parts = []
        for name in self.names:
            versions = sorted(w.version for w in self.workflows if w.name == name)
            # In the workflow's own parentheses: beside another workflow, whose it is is clear.
            notes = ["default"] if name == self.default else []
            if len(versions) > 1:
                notes.append(f"v{', v'.join(map(str, versions[:-1]))} kept for the orders that "
                             "started on it")
            parts.append(f"{name} v{versions[-1]}" + (f" ({'; '.join(notes)})" if notes else ""))
        return "; ".join(parts)

    @property
    def names(self) -> list[str]:
        return sorted({w.name for w in self.workflows})

    @property
    def services(self) -> list[str]:
        """Every service a registered workflow calls, in the order first named."""
        return list(dict.fromkeys(s.service for w in self.workflows for s in w.steps))

    @property
    def code_services(self) -> dict[str, CodeService]:
        """The services that are the user's own code, by name (the rest speak HTTP)."""
        return {c.name: c for w in self.workflows for c in w.services
                if isinstance(c, CodeService)}

    @property
    def limits(self) -> dict[str, Limit]:
        """Each limited service's limit, by name (a service with none has no entry)."""
        return {c.name: c.limit for w in self.workflows for c in w.services
                if c.limit is not None}

    @property
    def operations(self) -> dict[str, dict[str, str]]:
        """Each service's operations, as do or undo: what its Agent may ask of it."""
        ops: dict[str, dict[str, str]] = {}
        for w in self.workflows:
            for s in w.steps:
                ops.setdefault(s.service, {})[s.operation] = "do"
                if s.compensation is not None:
                    ops[s.service][s.compensation] = "undo"
        return ops

    @property
    def budgets(self) -> list[timedelta]:
        return [s.budget for w in self.workflows for s in w.steps]

    def with_budgets(self, budgets: dict[str, timedelta]) -> Registry:
        """Budgets by step name, for every workflow (and version) that has the step."""
        known = {s.name for w in self.workflows for s in w.steps}
        unknown = set(budgets) - known
        if unknown:
            raise ValueError(f"budget given for unknown steps: {sorted(unknown)}")
        return replace(self, workflows=tuple(
            w.with_budgets({k: v for k, v in budgets.items() if k in {s.name for s in w.steps}})
            for w in self.workflows))
