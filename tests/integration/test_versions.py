"""A declaration changes while orders are in flight (docs/adapting.md, "Changing a workflow"):
a step is inserted in a new version; orders already under way finish, or are undone, on the
version they started with, new orders take the new one, and an instance of the older release
leaves the new version's orders to the newer one. Against Azurite."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import timedelta
from typing import Any

from shared import bootstrap
from shared.domain.workflow import Registry, Step
from shared.handlers.scheduler import Outcome
from shared.settings import load_settings
from tests.integration.helpers import drain_json, order
from tests.integration.test_scheduler import reply
from tests.workflow import FLOW, HOLD, queue_settings

CHECK = Step("check", service="delta", operation="check", compensation=None,
             budget=timedelta(seconds=20))
# Version 2 checks between holding and taking.
FLOW_2 = dataclasses.replace(FLOW, version=2, steps=(HOLD, CHECK, *FLOW.steps[1:]))


def test_a_step_inserted_mid_flight_changes_only_the_orders_started_after_it(
        app_env: Any) -> None:
    env = app_env()
    queues = queue_settings(env["StateTableName"][-10:].lower(), ["alpha", "beta", "delta",
                                                                   "gamma"])
    settings = load_settings({**env, **queues})
    old = bootstrap.build(settings, workflows=Registry.of([FLOW]))
    new = bootstrap.build(settings, workflows=Registry.of([FLOW, FLOW_2]))
    try:
        old.ensure_resources()
        new.ensure_resources()
        q = {s: v.queue for s, v in new.config.services.items()}

        def answer(c: bootstrap.Container, service: str, outcome: str = "ok") -> dict[str, Any]:
            (req,) = drain_json(q[service])
            c.scheduler.handle_reply(reply(req, outcome, None if outcome == "ok" else "no"))
            return req

        # Two orders under way on version 1 when version 2 is deployed: held, taking sent.
        for oid in ("v1-done", "v1-undone"):
            old.intake.handle(f"m-{oid}", json.dumps(order(oid, workflow="test-flow")).encode())
            answer(old, "alpha")
        # The new release takes a new order on version 2, and the old orders' replies.
        new.intake.handle("m-v2", json.dumps(order("v2", workflow="test-flow")).encode())
        assert answer(new, "alpha")["order_id"] == "v2"
        (check,) = drain_json(q["delta"])
        assert (check["order_id"], check["step"]) == ("v2", "check")
        # Meanwhile an instance of the old release meets a reply for the new version's order:
        # it writes nothing and puts the reply back for the new release.
        before = new.store.get_state("v2")
        assert old.scheduler.handle_reply(reply(check)).outcome is Outcome.DEFERRED
        assert new.store.get_state("v2") == before
        new.scheduler.handle_reply(reply(check))

        takes = {r["order_id"]: r for r in drain_json(q["beta"])}
        assert set(takes) == {"v1-done", "v1-undone", "v2"}
        for oid in ("v1-done", "v2"):
            new.scheduler.handle_reply(reply(takes[oid]))
        new.scheduler.handle_reply(reply(takes["v1-undone"], "permanent_error", "refused"))
        sends = {r["order_id"]: r for r in drain_json(q["gamma"])}
        assert set(sends) == {"v1-done", "v2"}
        for r in sends.values():
            new.scheduler.handle_reply(reply(r))
        # The failed version-1 order is undone on its own path: the hold (the refused take
        # did nothing and is not undone), and not a step of version 2.
        assert drain_json(q["beta"]) == []
        (undo,) = drain_json(q["alpha"])
        assert (undo["order_id"], undo["step"], undo["action"]) == ("v1-undone", "hold", "undo")
        new.scheduler.handle_reply(reply(undo))
        assert drain_json(q["beta"]) == []
        assert drain_json(q["delta"]) == []  # no version-1 order was ever checked

        def seen(oid: str) -> tuple[Any, ...]:
            st = new.store.get_state(oid)
            assert st is not None
            return (st.workflow_version, [(x.name, x.status.value) for x in st.steps],
                    st.process_state.value, st.compensation.value if st.compensation else None)

        assert seen("v1-done") == (1, [("hold", "completed"), ("take", "completed"),
                                       ("send", "completed")], "Processed", None)
        assert seen("v2") == (2, [("hold", "completed"), ("check", "completed"),
                                  ("take", "completed"), ("send", "completed")], "Processed", None)
        assert seen("v1-undone") == (1, [("hold", "compensated"), ("take", "failed"),
                                         ("send", "not_started")], "Error", "Done")
    finally:
        old.close()
        new.close()


def test_the_app_says_at_start_up_which_versions_it_keeps(
        caplog: Any, app_env: Any) -> None:
    env = app_env()
    with caplog.at_level(logging.INFO, logger="shared.bootstrap"):
        c = bootstrap.build(load_settings({**env, **queue_settings("x", ["alpha", "beta",
                                                                      "delta", "gamma"])}),
                            workflows=Registry.of([FLOW, FLOW_2]))
        c.close()
    assert ("workflows: test-flow v2 (default; v1 kept for the orders that started on it)"
            in caplog.text)
