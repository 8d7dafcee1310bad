"""What ships: the deployment package built as the tools build it, from the working tree with
.funcignore applied (gitignore rules), holds the app and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import pathspec

from tests.conftest import ROOT

SHIPS = {"function_app.py", "host.json", "requirements.txt", "shared", ".funcignore"}


def package(root: Path) -> set[str]:
    """Every file the package would hold, relative to the project root."""
    ignore = pathspec.PathSpec.from_lines("gitignore", (root / ".funcignore").read_text()
                                          .splitlines())
    files: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        # Do not descend into ignored folders (as the tools do; and .venv is large).
        dirnames[:] = [d for d in dirnames
                       if not ignore.match_file(f"{(rel_dir / d).as_posix()}/")]
        for f in filenames:
            rel = (rel_dir / f).as_posix()
            if not ignore.match_file(rel):
                files.add(rel)
    return files


def test_the_package_holds_the_app_and_nothing_else() -> None:
    files = package(ROOT)
    assert {"function_app.py", "host.json", "requirements.txt",
            "shared/functions/web.py", "shared/domain/state.py"} <= files
    top = {f.split("/")[0] for f in files}
    assert top <= SHIPS, f"would ship: {sorted(top - SHIPS)}"
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]


def test_the_package_check_catches_a_stray_folder(tmp_path: Path) -> None:
    (tmp_path / ".funcignore").write_text((ROOT / ".funcignore").read_text())
    for f in ("function_app.py", "host.json", "requirements.txt", "shared/x.py",
              "tests/test_x.py", "bench-report/report.json", "scratch/notes.txt"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    top = {f.split("/")[0] for f in package(tmp_path)}
    assert top - SHIPS == {"scratch"}  # tests and bench output are ignored; the stray is not
