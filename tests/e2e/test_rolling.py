"""A rolling deployment under load (issue #30): the previous release, from the git history, and
this one side by side on one Azurite, the hosts rolled over one by one (``make rolling`` runs it
at 300 orders). Every order settles, nothing is lost or done twice, nothing is left overdue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localrun.rolling import DEFAULT_PREVIOUS, has_commit
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
    # It leaves nothing behind: no worktree, no Azurite.
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"],
                               capture_output=True, text=True, check=True).stdout
    assert "rolling-" not in worktrees, worktrees
    assert servers_on(data / "azurite") == []
