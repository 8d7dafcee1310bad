"""A rolling deployment under load (issue #30): the previous release, from the git history, and
this one side by side on one Azurite, the hosts rolled over one by one (``make rolling`` runs it
at 300 orders). Every order settles, nothing is lost or done twice, nothing is left overdue.

During the roll an operator resubmits failed orders through the operator API of whichever host
is up (either release): compensated ones as they are, ones whose compensation failed (the
services refuse some undos) with force; once every host runs this release, some orders name the
second workflow. Each resubmit is taken, and each such order runs by its own workflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localrun.rolling.hosts import has_commit
from localrun.rolling.rolling import DEFAULT_PREVIOUS
from tests.conftest import ROOT
from tests.e2e.test_demo import servers_on


@pytest.mark.skipif(not has_commit(DEFAULT_PREVIOUS),
                    reason=f"this clone has no history for the previous release "
                           f"{DEFAULT_PREVIOUS} (a shallow clone): `git fetch --unshallow`")
@pytest.mark.timeout(240)
def test_a_rolling_deployment_under_load_settles_every_order_once(tmp_path: Path) -> None:
    data = tmp_path / "rolling"
    p = subprocess.run(
        [sys.executable, "-m", "localrun.rolling", "--previous", DEFAULT_PREVIOUS,
         "--orders", "60", "--phase-seconds", "8", "--quick", "--settle-timeout", "90",
         "--data", str(data)],
        cwd=ROOT, capture_output=True, text=True, timeout=230,
        env={k: v for k, v in os.environ.items() if not k.startswith("AzureWebJobs")})
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    assert "PASS:" in out, out[-3000:]
    summary = json.loads((data / "summary.json").read_text())["summary"]
    assert summary["orders_sent"] == summary["settled"] == 60
    # Both hosts rolled, and orders were in the hands of both releases.
    assert [r["host"].split("@")[0] for r in summary["rolls"]] == ["host1", "host2"]
    assert summary["orders_handled_by"].get("current + previous", 0) > 0, summary
    # An operator resubmitted failed orders during the roll, normally and with force (which
    # release took each is in the summary: whichever host was up), and each settled again.
    kinds = {k.split()[1] for k, n in summary["resubmits"].items() if k.endswith(" 202")}
    assert kinds == {"normal", "forced"}, summary["resubmits"]
    assert summary["undo_refused"], summary
    assert sum(summary["resubmitted_then"].values()) == summary["resubmitted_orders"] > 0
    # Orders of the second workflow, sent once the rollout was over, ran by it.
    assert summary["digital_sent"] > 0
    assert summary["digital_outcomes"].get("Processed", 0) > 0, summary["digital_outcomes"]
    # It leaves nothing behind: no worktree, no Azurite.
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"],
                               capture_output=True, text=True, check=True).stdout
    assert "rolling-" not in worktrees, worktrees
    assert servers_on(data / "azurite") == []
