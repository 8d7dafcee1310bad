"""What an operator does with re-drives (shared/domain/redrive.py): look at what one would pick,
start one, list them and see one's progress, pause, resume or cancel it. Used by the HTTP API
and the orders CLI alike; every action is audited, and refused with the reason when it does
not apply. The runner that carries them out is handlers/redrive.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from shared.adapters.redrives import RedriveStore
from shared.adapters.state_store import ConcurrencyConflict, OrderStore
from shared.clock import Clock
from shared.domain.limits import Limit
from shared.domain.redrive import (
    DEFAULT_RATE,
    MAX_ACTIVE,
    MIN_RATE,
    NotApplicable,
    Redrive,
    Selection,
)
from shared.domain.state import CompensationState, ProcessState
from shared.domain.workflow import Registry
from shared.handlers.audit import OperatorAction, audit
from shared.handlers.operator_requests import MAX_PAGE, MAX_REASON, RedriveRequest
from shared.handlers.views import RedriveList, RedrivePreview, RedriveView

# Failed orders a dry run reads at most (as a bulk resubmit's look does).
PREVIEW_SCAN = 5000
PREVIEW_PAGES = 20
SAMPLE = 10
LISTED = 50


class RedriveRefused(Exception):
    """Paused already, ended, or changed meanwhile: 409, saying which."""


class UnknownRedrive(LookupError):
    """No re-drive of that id, or a selection naming a workflow, version or step this app does
    not have: 404, naming the ones it has."""


class RedriveControl:
    def __init__(self, *, store: RedriveStore, orders: OrderStore, workflows: Registry,
                 limits: Mapping[str, Limit], clock: Clock) -> None:
        self._store = store
        self._orders = orders
        self._workflows = workflows
        self._limits = limits
        self._clock = clock

    def _selection(self, ask: RedriveRequest) -> Selection:
        """The request's selection, its names checked against the app's workflows (404)."""
        names = self._workflows.names
        if ask.workflow is not None and ask.workflow not in names:
            raise UnknownRedrive(f"workflow: no workflow {ask.workflow!r} (this app's: "
                                 f"{', '.join(names)})")
        flows = [w for w in self._workflows.workflows
                 if ask.workflow is None or w.name == ask.workflow]
        if ask.version is not None and ask.version not in {w.version for w in flows}:
            raise UnknownRedrive(f"version: no version {ask.version} of "
                                 f"{ask.workflow or 'any workflow'} runs here")
        steps = sorted({s.name for w in flows for s in w.steps})
        if ask.failed_step is not None and ask.failed_step not in steps:
            raise UnknownRedrive(f"failed_step: no step {ask.failed_step!r} (the steps: "
                                 f"{', '.join(steps)})")
        if ask.since and ask.until and ask.since >= ask.until:
            raise ValueError("since must be before until")
        return Selection(workflow=ask.workflow, version=ask.version,
                         failed_step=ask.failed_step, error_text=ask.error_text,
                         since=ask.since, until=ask.until, force=ask.force)

    def _rate(self, ask: RedriveRequest) -> float:
        """As asked, or the slowest limit a second among the services of the workflows it
        picks from (so its orders do not wait out their steps at a limit), or DEFAULT_RATE."""
        if ask.rate is not None:
            return ask.rate
        services = {s.service for w in self._workflows.workflows
                    if ask.workflow is None or w.name == ask.workflow for s in w.steps}
        rates = [lim.per_second for name, lim in self._limits.items()
                 if name in services and lim.per_second is not None]
        return max(MIN_RATE, min(rates, default=DEFAULT_RATE))

    def preview(self, ask: RedriveRequest) -> RedrivePreview:
        """What it would pick among the failed orders one look reads; nothing written."""
        selection = self._selection(ask)
        matched, scanned, token, pages = 0, 0, None, 0
        sample: list[str] = []
        # Bounded by pages too: the query filters on a property, and the service may answer a
        # page of a big table with nothing while it reads on.
        while scanned < PREVIEW_SCAN and pages < PREVIEW_PAGES:
            pages += 1
            states, token = self._orders.list_states(ProcessState.ERROR.value, MAX_PAGE, token)
            scanned += len(states)
            for s in states:
                if selection.picks(s, self._workflows.default) and (
                        selection.force or s.compensation is not CompensationState.FAILED):
                    matched += 1
                    if len(sample) < SAMPLE:
                        sample.append(s.order_id)
            if not token:
                break
        return RedrivePreview(Picks=selection.describe(), Matched=matched, Scanned=scanned,
                              More=bool(token), Sample=sample, Rate=self._rate(ask))

    def start(self, ask: RedriveRequest, by: str | None) -> RedriveView:
        if not ask.reason.strip() or len(ask.reason) > MAX_REASON:
            raise ValueError(f"a re-drive needs a reason of 1 to {MAX_REASON} characters")
        selection = self._selection(ask)
        now = self._clock()
        # Orders that fail from now on are not its to pick: it would chase its own tail.
        until = min(selection.until, now) if selection.until else now
        active = [r for r, _ in self._store.listed(MAX_ACTIVE, active_only=True)]
        if len(active) >= MAX_ACTIVE:
            raise RedriveRefused(f"{len(active)} re-drives are running or paused: cancel or "
                                 f"finish one first (at most {MAX_ACTIVE})")
        redrive = Redrive(id=Redrive.new_id(now),
                          selection=selection.model_copy(update={"until": until}),
                          rate=self._rate(ask), reason=Redrive.words(ask.reason) or "",
                          by=by, created=now, updated=now)
        self._store.write(redrive, None)
        audit(OperatorAction.REDRIVE, redrive.id, by, ask.reason,
              f"started: {redrive.selection.describe()}, {redrive.rate:g} a second", now)
        return RedriveView.of(redrive)

    def list(self) -> RedriveList:
        return RedriveList(Redrives=[RedriveView.of(r) for r, _ in self._store.listed(LISTED)])

    def get(self, redrive_id: str) -> RedriveView:
        redrive, _ = self._read(redrive_id)
        return RedriveView.of(redrive)

    def pause(self, redrive_id: str, reason: str, by: str | None) -> RedriveView:
        return self._change(OperatorAction.REDRIVE_PAUSE, redrive_id, reason, by,
                            lambda r: r.pause(self._clock(), by, reason))

    def resume(self, redrive_id: str, reason: str, by: str | None) -> RedriveView:
        return self._change(OperatorAction.REDRIVE_RESUME, redrive_id, reason, by,
                            lambda r: r.resume(self._clock(), by, reason))

    def cancel(self, redrive_id: str, reason: str, by: str | None) -> RedriveView:
        return self._change(OperatorAction.REDRIVE_CANCEL, redrive_id, reason, by,
                            lambda r: r.cancel(self._clock(), by, reason))

    def _read(self, redrive_id: str) -> tuple[Redrive, str]:
        if not redrive_id.startswith("rd-") or len(redrive_id) > 40:
            raise UnknownRedrive(f"no re-drive {redrive_id[:40]!r}")
        redrive, version = self._store.read(redrive_id)
        if version is None:
            raise UnknownRedrive(f"no re-drive {redrive_id}")
        if redrive is None:
            raise RedriveRefused(f"re-drive {redrive_id} was written by a newer release of "
                                 "the app: act on it there")
        return redrive, version

    def _change(self, action: OperatorAction, redrive_id: str, reason: str, by: str | None,
                change: Callable[[Redrive], Redrive]) -> RedriveView:
        if len(reason) > MAX_REASON:
            raise ValueError(f"a reason is at most {MAX_REASON} characters")
        # A runner's own writes (progress) move the record on: read again and decide afresh.
        for _ in range(5):
            redrive, version = self._read(redrive_id)
            try:
                new = change(redrive)
                self._store.write(new, version)
            except NotApplicable as e:
                audit(action, redrive_id, by, reason, f"refused: {e}", self._clock())
                raise RedriveRefused(str(e)) from None
            except ConcurrencyConflict:
                continue
            audit(action, redrive_id, by, reason, "done", self._clock())
            return RedriveView.of(new)
        why = f"re-drive {redrive_id} kept changing; look again"
        audit(action, redrive_id, by, reason, f"refused: {why}", self._clock())
        raise RedriveRefused(why)
