"""No import cycle among the modules of localrun, shared and orderctl: not at load time, not in
a function, not even for types (under ``if TYPE_CHECKING:``). Where one module needs another's
shape, it says so with a small ``typing.Protocol`` of its own instead of importing the class.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import``
anywhere in a module, relative ones resolved, ``from pkg import mod`` taken as an import of
``pkg.mod`` where that is a module, and a package's ``__init__`` a module like any other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("localrun", "shared", "orderctl")


def package_modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under ``root``, by its dotted name (a package by its own)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom,
              modules: set[str]) -> set[str]:
    """The modules of ``modules`` that one import statement of module ``name`` imports."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
        # `import a.b.c` where only a.b is known (c a name in it): the deepest known module.
        out = set()
        for target in targets:
            parts = target.split(".")
            for n in range(len(parts), 0, -1):
                if ".".join(parts[:n]) in modules:
                    out.add(".".join(parts[:n]))
                    break
        return out
    if node.level:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        base = ".".join(package[:len(package) - node.level + 1])
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module or ""
    out = set()
    for alias in node.names:
        # `from pkg import mod`: the module pkg.mod, where there is one; else a name in pkg.
        sub = f"{source}.{alias.name}"
        if sub in modules:
            out.add(sub)
        elif source in modules:
            out.add(source)
    return out


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Each module's imports of the others, from every import statement in it."""
    paths = {n: p for pkg in packages for n, p in package_modules(root, pkg).items()}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                deps |= _imported(name, path, node, set(paths))
        graph[name] = deps - {name}
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components (iterative): each set of modules that reach one another."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, deps = work[-1]
            for dep in deps:
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(sorted(graph[dep]))))
                    break
                if dep in on_stack:
                    low[node] = min(low[node], index[dep])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(component)
    return components


def _cycle_through(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """A shortest cycle from ``start`` back to it, inside one component."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for dep in sorted(graph[node] & within):
                if dep == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if dep not in came:
                    came[dep] = node
                    nxt.append(dep)
        frontier = nxt
    raise AssertionError(f"{start} is on no cycle")  # pragma: no cover


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle for each group of modules that import one another, round and round."""
    return [_cycle_through(graph, min(c), c)
            for c in _strongly_connected(graph) if len(c) > 1]


def _show(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package: str) -> None:
    # The three packages in one graph: a cycle through another package counts for this one.
    cycles = [c for c in import_cycles(import_graph(ROOT, PACKAGES))
              if any(m == package or m.startswith(package + ".") for m in c)]
    assert not cycles, f"import cycles through {package}:\n{_show(cycles)}"


def test_the_checker_finds_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("import typing\n")
    assert import_cycles(import_graph(tmp_path, ["pkg"])) == []
    # An import back from b makes a cycle however it is made: for a type only, in a function
    # (and relative), or plainly.
    for back in ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n",
                 "def f() -> None:\n    from . import a\n",
                 "import pkg.a\n"):
        (pkg / "b.py").write_text(back)
        assert import_cycles(import_graph(tmp_path, ["pkg"])) == [["pkg.a", "pkg.b", "pkg.a"]]
