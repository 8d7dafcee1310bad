"""What an operator does with pauses (shared/domain/pauses.py): list them, pause a service or a
workflow, resume it. Used by the HTTP API and the orders CLI alike; every action is audited,
and refused with the reason when it does not apply."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shared.adapters.pauses import PauseStore
from shared.adapters.state_store import ConcurrencyConflict
from shared.clock import Clock
from shared.domain.pauses import NotPausable, Pause, PauseKind, Target
from shared.handlers.audit import OperatorAction, audit
from shared.handlers.operator_requests import MAX_REASON
from shared.handlers.views import PauseList, PauseView


class PauseRefused(Exception):
    """Paused already, not paused, or changed meanwhile: 409, saying which."""


class UnknownTarget(Exception):
    """No such service or workflow in this app: 404, naming the ones there are."""


class PauseControl:
    def __init__(self, *, store: PauseStore, services: Sequence[str],
                 workflows: Sequence[str], clock: Clock) -> None:
        self._store = store
        self._names = {PauseKind.SERVICE: sorted(services),
                       PauseKind.WORKFLOW: sorted(workflows)}
        self._clock = clock

    def target(self, kind: str, name: str) -> Target:
        try:
            k = PauseKind(kind)
        except ValueError:
            raise ValueError(f"{kind[:40]!r} is not a kind of pause: service or workflow"
                             ) from None
        if name not in self._names[k]:
            raise UnknownTarget(f"no {k.value} {name[:80]!r} (this app's {k.value}s: "
                                f"{', '.join(self._names[k])})")
        return Target(k, name)

    def list(self) -> PauseList:
        """Every service and workflow, the paused first (one read of the store)."""
        pauses = self._store.read_all()
        views = [PauseView.of(pauses.of(Target(k, n)))
                 for k, names in self._names.items() for n in names]
        return PauseList(Pauses=sorted(views, key=lambda v: not v.Paused))

    def pause(self, kind: str, name: str, reason: str, by: str | None) -> PauseView:
        if not reason.strip() or len(reason) > MAX_REASON:
            raise ValueError(f"a pause needs a reason of 1 to {MAX_REASON} characters")
        return self._change(OperatorAction.PAUSE, self.target(kind, name), reason, by,
                            lambda p: p.pause(self._clock(), by, reason))

    def resume(self, kind: str, name: str, reason: str, by: str | None) -> PauseView:
        if len(reason) > MAX_REASON:
            raise ValueError(f"a reason is at most {MAX_REASON} characters")
        return self._change(OperatorAction.RESUME, self.target(kind, name), reason, by,
                            lambda p: p.resume(self._clock()))

    def _change(self, action: OperatorAction, target: Target, reason: str, by: str | None,
                change: Callable[[Pause], Pause]) -> PauseView:
        pause, version = self._store.read(target)
        try:
            new = change(pause)
            self._store.write(new, version)
        except NotPausable as e:
            audit(action, str(target), by, reason, f"refused: {e}", self._clock())
            raise PauseRefused(str(e)) from None
        except ConcurrencyConflict:
            why = f"{target} was paused or resumed meanwhile; look again"
            audit(action, str(target), by, reason, f"refused: {why}", self._clock())
            raise PauseRefused(why) from None
        audit(action, str(target), by, reason, "done", self._clock())
        return PauseView.of(new)
