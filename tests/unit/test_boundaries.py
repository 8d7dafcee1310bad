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
               "shared.entrypoints", "shared.blueprints", "opentelemetry")
    bad = sorted(i for i in imports(path) if any(_under(i, o) for o in outside))
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_the_check_sees_an_import_when_there_is_one(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("from shared.workflows.orders import ORDER_FULFILMENT\nimport azure.functions\n")
    assert {"shared.workflows.orders", "azure.functions"} <= imports(p)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles(paths: list[Path]) -> list[list[str]]:
    """Cycles among these modules' imports made when a module loads (its top-level statements):
    an import inside a function, or under TYPE_CHECKING, waits until it is needed."""
    names = {_module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        found: set[str] = set()
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[name] = {n for n in found if n in names and n != name}
    cycles: list[list[str]] = []

    def walk(name: str, path: list[str]) -> None:
        for dep in sorted(graph[name]):
            if dep in path:
                cycles.append([*path[path.index(dep):], dep])
            elif len(path) < 12:
                walk(dep, [*path, dep])

    for name in graph:
        walk(name, [name])
    return cycles


def test_no_tool_or_app_module_imports_itself_round_a_cycle() -> None:
    """The review's: bench, host, metering and worker imported each other, and localrun and
    orderctl too; a cycle makes import order matter and the layers unreadable."""
    paths = [*modules(ROOT / "localrun"), *modules(ROOT / "orderctl"), *modules(SHARED)]
    assert import_cycles(paths) == []


def test_the_cycle_check_sees_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import x\n")
    (tmp_path / "pkg" / "b.py").write_text("def f() -> None:\n    from pkg.a import y\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert import_cycles(modules(tmp_path / "pkg")) == []  # b's import waits for f()
    (tmp_path / "pkg" / "b.py").write_text("from pkg import a\n")
    assert import_cycles(modules(tmp_path / "pkg")) != []
