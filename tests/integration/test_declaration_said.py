"""A workflow declared wrongly, as a developer adapting the app first meets it: each command
they run next (the demo, the local host, the contracts script, the `orders` CLI) says what is
wrong in one line and exits 2, with no traceback and before it starts anything."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# As if shared/workflows/ declared a service named loyalty_svc: importing it fails as the
# declaration's own check fails.
BROKEN = """
import importlib.abc, runpy, sys
from shared.domain.workflow import Workflow
from tests.workflow import FLOW, Thing
from dataclasses import replace

class Broken(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "shared.workflows":
            Workflow(name="loyalty-points", message=Thing,
                     steps=(replace(FLOW.steps[0], service="loyalty_svc"),))
        return None

sys.meta_path.insert(0, Broken())
sys.argv = [sys.argv[0], *sys.argv[1:]]
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("command", [
    ["localrun", "demo", "--port", "0"],
    ["localrun", "host", "--port", "0"],
    ["shared.contracts", "--check"],
    ["orderctl", "list"],
], ids=lambda c: " ".join(c[:2]))
def test_each_command_says_what_is_wrong_in_one_line(command: list[str]) -> None:
    # A session of its own: were the check to fail and the demo start Azurite, it goes too.
    p = subprocess.Popen([sys.executable, "-c", BROKEN, *command], cwd=ROOT, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    run = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    said = run.stderr.strip()
    assert run.returncode == 2, run.stderr[-2000:]
    assert said.splitlines() == [said] and "Traceback" not in said, said
    assert said.startswith("error: workflow 'loyalty-points' v1: a service's name is 2 to 31")
    assert "docs/adapting.md" in said
    assert "starting Azurite" not in run.stdout
