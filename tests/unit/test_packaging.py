"""`pip install ".[cli]"` gives a working `orders` CLI: every third-party module the app and the
CLI import is a dependency the package declares (requirements.in, or the `cli` extra), at the
version the development tools pin."""

from __future__ import annotations

import ast
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement

from tests.conftest import ROOT

# What the CLI reaches: the package, the CLI, and the local Service Bus stand-in it sends through.
# (`python -m shared.contracts`, which writes the schemas, is a development tool: it needs PyYAML
# from requirements-dev.txt.)
SHIPPED = [*(p for p in ROOT.glob("shared/**/*.py") if p != ROOT / "shared/contracts/__main__.py"),
           *ROOT.glob("orderctl/*.py"), ROOT / "function_app.py",
           ROOT / "localrun" / "servicebus.py"]
FIRST_PARTY = {"shared", "orderctl", "localrun", "function_app"}


def _names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def _requirements(lines: list[str]) -> dict[str, Requirement]:
    reqs = [Requirement(line.split("#")[0].strip()) for line in lines
            if line.strip() and not line.lstrip().startswith(("#", "-"))]
    return {r.name.lower(): r for r in reqs}


def test_every_module_the_app_and_cli_import_is_a_declared_dependency() -> None:
    import sys

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _requirements((ROOT / "requirements.in").read_text().splitlines())
    declared |= _requirements(project["optional-dependencies"]["cli"])
    providers = packages_distributions()
    imported = set().union(*(_names(p) for p in SHIPPED)) - FIRST_PARTY
    third_party = {m for m in imported if m not in sys.stdlib_module_names}
    missing = {m: providers.get(m) for m in third_party
               if not {d.lower() for d in providers.get(m, [])} & set(declared)}
    assert not missing, f"imported but not declared (module: its distributions): {missing}"


def test_the_cli_extra_pins_what_the_tools_pin() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dev = _requirements((ROOT / "requirements-dev.txt").read_text().splitlines())
    for name, req in _requirements(project["optional-dependencies"]["cli"]).items():
        assert dev[name].specifier == req.specifier, name
