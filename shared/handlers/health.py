"""Is the app's storage reachable? Every check at once, and an answer within a deadline.

Each check uses clients that try once with short timeouts (``probe_options``); the checks run in
parallel, and one that has not answered by the deadline is reported as such, so a storage outage
is a prompt 503, never a request the caller's front end gives up on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

Check = Callable[[], object]

# Well inside a caller's patience: the checks' own timeouts are shorter still.
DEADLINE_SECONDS = 4.0


class HealthProbe:
    def __init__(self, checks: Mapping[str, Check], deadline: float = DEADLINE_SECONDS) -> None:
        self._checks = dict(checks)
        self._deadline = deadline

    def run(self) -> dict[str, Any]:
        pool = ThreadPoolExecutor(max_workers=max(1, len(self._checks)),
                                  thread_name_prefix="health")
        try:
            futures = {name: pool.submit(check) for name, check in self._checks.items()}
            wait(futures.values(), timeout=self._deadline)
            results = {name: _outcome(f, self._deadline) for name, f in futures.items()}
        finally:
            pool.shutdown(wait=False, cancel_futures=True)  # a hung check is not waited for
        ok = all(v == "ok" for v in results.values())
        return {"status": "ok" if ok else "unhealthy", "checks": results}


def _outcome(future: Any, deadline: float) -> str:
    if not future.done():
        return f"no answer within {deadline:g} s"
    e = future.exception()
    return "ok" if e is None else f"{type(e).__name__}: {e}"[:300]
