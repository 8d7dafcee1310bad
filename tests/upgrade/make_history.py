"""Write tests/upgrade/history from the git history: each release's own code, checked out in a
worktree, builds an order in flight (the first step done, the second sent and unanswered) and
serialises it as that release stored it (its state record, order row and in-flight entry).

    python -m tests.upgrade.make_history        # needs the clone's history

The fixtures are committed; this script is how they were made, and how to add a release's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "history"

# Run inside the old release's checkout: prints {"state": ..., "order": ..., "index": ...}.
SNIPPETS = {
    # The wave-1 release of the rolling-deployment report: no work keys, no outbox, no due-time
    # index (an `inflight` entry named by the order id, with only Since).
    "d7828b5": """
import json
from datetime import UTC, datetime, timedelta
from shared.adapters.state_store import state_to_entity
from shared.domain.messages import Action, AgentReply, ReplyOutcome, idempotency_key
from shared.domain.state import apply_reply, claim, new_order_state
from shared.domain.workflow import ORDER_FULFILMENT as W
t0 = datetime(2026, 6, 1, 12, tzinfo=UTC)
s = new_order_state("legacy-1", W, t0)
s = claim(s, "old-host", t0, W).state
s = apply_reply(s, AgentReply(order_id="legacy-1", step="reserve_inventory", action=Action.DO,
                              attempt=1, outcome=ReplyOutcome.OK), "old-host",
                t0 + timedelta(seconds=1), W).state
index = {"PartitionKey": "inflight", "RowKey": "legacy-1", "Since": s.updated_at}
# The key that release's Agent called the inventory service with for the step it completed.
done = {"reserve_inventory": idempotency_key("legacy-1", "reserve_inventory", Action.DO)}
print(json.dumps({"state": state_to_entity(s), "index": index, "work_done_under": done},
                 default=str))
""",
    # The release before this work (session 16's base): work keys and an outbox on the record,
    # a due-time index of 16 shards; no SchemaVersion, Workflow or Timeline.
    "8c37dae": """
import json
from datetime import UTC, datetime, timedelta
from shared.adapters.state_store import state_to_entity
from shared.domain import due_index
from shared.domain.messages import Action, AgentReply, ReplyOutcome
from shared.domain.state import apply_reply, claim, receive
from shared.domain.workflow import ORDER_FULFILMENT as W
t0 = datetime(2026, 6, 1, 12, tzinfo=UTC)
s = receive("legacy-1", W, t0)
s = claim(s, "old-host", t0, W).state
s = apply_reply(s, AgentReply(order_id="legacy-1", step="reserve_inventory", action=Action.DO,
                              attempt=1, outcome=ReplyOutcome.OK), "old-host",
                t0 + timedelta(seconds=1), W).state
s.outbox = []  # its Scheduler sent the charge request and confirmed it sent
grace = timedelta(seconds=60)  # PendingGraceSeconds, the store's horizon too
key = due_index.key_to_file(s, grace, grace, exact=False)
s.index_key = str(key)
index = {"PartitionKey": key.partition, "RowKey": key.row, "OrderID": "legacy-1",
         "Generation": s.generation, "Since": s.updated_at, "Base": ""}
done = {"reserve_inventory": s.step("reserve_inventory").work_key}
print(json.dumps({"state": state_to_entity(s), "index": index, "work_done_under": done},
                 default=str))
""",
}

ORDER = {"order_id": "legacy-1", "customer_id": "c-1",
         "items": [{"sku": "SKU-TEA", "quantity": 2, "unit_price": "4.50"}]}


def make(commit: str, snippet: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "release"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                        commit], check=True, capture_output=True)
        try:
            out = subprocess.run([sys.executable, "-c", snippet], cwd=tree, check=True,
                                 capture_output=True, text=True,
                                 env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}).stdout
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           check=True, capture_output=True)
    made = json.loads(out)
    subject = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%s", commit],
                             check=True, capture_output=True, text=True).stdout.strip()
    return {"commit": commit, "release": subject[:200], "order": ORDER, **made}


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for commit, snippet in SNIPPETS.items():
        fixture = make(commit, snippet)
        (OUT / f"in-flight-{commit}.json").write_text(json.dumps(fixture, indent=2) + "\n")
        print(f"wrote in-flight-{commit}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
