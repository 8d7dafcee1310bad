"""The demo's view of its orders: an order intake rejected is done (the demo stops waiting for
it and says why), not "not yet received" until the timeout."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from azure.data.tables import TableEntity

from localrun.demo import Snapshot
from shared.adapters.state_entity import state_to_entity
from shared.domain.state import ProcessState
from shared.domain.transitions import receive
from tests.workflow import FLOW

AT = datetime(2026, 1, 1, tzinfo=UTC)


def row(order_id: str, state: ProcessState) -> dict[str, Any]:
    """As the demo reads it back: a table entity, with its ETag."""
    s = receive(order_id, FLOW, AT)
    s.process_state = state
    e = TableEntity(state_to_entity(s))
    e._metadata = {"etag": 'W/"1"', "timestamp": AT}
    return e


def test_a_rejected_order_counts_as_done_and_is_not_awaited() -> None:
    rejected = [{"MessageId": "o-3", "Kind": "invalid", "Reason": "items: too short"}]
    snap = Snapshot(3, [row("o-1", ProcessState.PROCESSED), row("o-2", ProcessState.PROCESSING)],
                    rejected)
    assert snap.done == 2  # the processed one and the rejected one; one still at work
    by_state = snap.by_state()
    assert by_state["rejected at intake"] == 1 and by_state["not yet received"] == 0
    both = [row("o-1", ProcessState.PROCESSED), row("o-2", ProcessState.PROCESSED)]
    assert Snapshot(3, both, rejected).done == 3  # nothing left to wait for
    assert Snapshot(3, both).done == 2 and Snapshot(3, both).by_state()["not yet received"] == 1
