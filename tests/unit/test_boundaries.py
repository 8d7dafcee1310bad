"""The house's walls, checked on the source: the engine never imports a workflow (it is handed
a registry), and the domain never imports Azure (or the adapters and handlers built on it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

SHARED = ROOT / "shared"
# Where a workflow registry is made and handed over: the app's, the contracts' and the tools'.
COMPOSITION_ROOTS = {ROOT / "function_app.py", SHARED / "contracts" / "__main__.py"}


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def modules(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


ENGINE = [p for p in modules(SHARED)
          if SHARED / "workflows" not in p.parents and p not in COMPOSITION_ROOTS]


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_engine_never_imports_a_workflow(path: Path) -> None:
    bad = sorted(i for i in imports(path) if _under(i, "shared.workflows"))
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}: hand it a Registry instead"


@pytest.mark.parametrize("path", modules(SHARED / "domain"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_domain_never_imports_azure_or_what_is_built_on_it(path: Path) -> None:
    outside = ("azure", "shared.adapters", "shared.handlers", "shared.bootstrap",
               "shared.functions", "opentelemetry")
    bad = sorted(i for i in imports(path) if any(_under(i, o) for o in outside))
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_the_check_sees_an_import_when_there_is_one(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("from shared.workflows.orders import ORDER_FULFILMENT\nimport azure.functions\n")
    assert {"shared.workflows.orders", "azure.functions"} <= imports(p)
