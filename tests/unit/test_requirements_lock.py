"""What ships is requirements.txt, the lock of requirements.in: every package, transitive ones
too, pinned and with its hashes, for every Python the app runs on; the Flex remote build and
`make` install it. It must say what requirements.in (the package's dependencies in
pyproject.toml) says."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from tests.conftest import ROOT

LOCK = ROOT / "requirements.txt"
REGENERATE = ("uv pip compile requirements.in --universal --python-version 3.11 "
              "--generate-hashes -o requirements.txt")
# The Pythons the app runs on: the oldest it supports, and what Flex Consumption offers.
PYTHONS = ["3.11", "3.12", "3.13"]


@dataclass(frozen=True)
class Locked:
    name: str
    version: str
    marker: Marker | None
    hashes: tuple[str, ...]
    via: tuple[str, ...]  # what asks for it: "-r requirements.in" or a locked package


def _environment(python: str) -> dict[str, str]:
    return {"python_version": python, "python_full_version": f"{python}.0"}


def _applies(marker: Marker | None, python: str) -> bool:
    return marker is None or marker.evaluate(_environment(python))


def lock_entries(text: str) -> list[Locked]:
    """The lock as uv writes it: a requirement line continued by --hash lines, then its
    "# via" lines."""
    out: list[Locked] = []
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        if block.startswith("#") or not block.strip():
            continue
        head = block.splitlines()[0].removesuffix("\\").strip()
        req = Requirement(head)
        pins = [s.version for s in req.specifier if s.operator == "=="]
        assert len(pins) == 1, f"{head}: not pinned with =="
        hashes = tuple(re.findall(r"--hash=(sha256:[0-9a-f]{64})", block))
        via_lines = [line.strip().removeprefix("#").strip() for line in block.splitlines()
                     if line.strip().startswith("#")]
        via = tuple(v.removeprefix("via").strip() for v in via_lines
                    if v.removeprefix("via").strip())
        out.append(Locked(req.name.lower(), pins[0], req.marker, hashes, via))
    return out


def shipped(text: str) -> list[Requirement]:
    return [Requirement(line.split("#")[0].strip()) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith(("#", "-"))]


def drift(requirements: str, lock: str) -> list[str]:
    """Every way the lock fails to be requirements.in's, as a sentence."""
    problems = []
    entries = lock_entries(lock)
    names = {e.name for e in entries}
    for e in entries:
        if not e.hashes:
            problems.append(f"{e.name}=={e.version} has no hash")
        for v in e.via:
            if v != "-r requirements.in" and v.lower() not in names:
                problems.append(f"{e.name} is there for {v}, which the lock does not hold")
    wanted = {r.name.lower() for r in shipped(requirements)}
    for e in entries:
        if e.via == ("-r requirements.in",) and e.name not in wanted:
            problems.append(f"{e.name} is locked for requirements.in, which no longer asks "
                            "for it")
    for python in PYTHONS:
        active = {e.name: e for e in entries if _applies(e.marker, python)}
        for req in shipped(requirements):
            if not _applies(req.marker, python):
                continue
            got = active.get(req.name.lower())
            if got is None:
                problems.append(f"{req.name} (Python {python}) is not in the lock")
            elif got.version not in req.specifier:
                problems.append(f"{req.name} (Python {python}): requirements.in asks for "
                                f"{req.specifier}, the lock has {got.version}")
            elif [s.operator for s in req.specifier] != ["=="]:
                problems.append(f"{req.name}: requirements.in pins nothing ({req.specifier})")
    return problems


def test_the_lock_is_requirements_txt_with_every_package_pinned_and_hashed() -> None:
    problems = drift((ROOT / "requirements.in").read_text(), LOCK.read_text())
    assert not problems, "; ".join(problems) + f". Regenerate: {REGENERATE}"


def test_the_lock_says_how_to_make_it_again() -> None:
    assert any(REGENERATE in line for line in LOCK.read_text().splitlines()[:3])
    assert REGENERATE in (ROOT / "requirements.in").read_text()


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("pydantic==2.14.3", "pydantic==2.14.4",
     "pydantic (Python 3.11): requirements.in asks for ==2.14.4, the lock has 2.14.3"),
    ("tenacity==9.2.1\n", "tenacity==9.2.1\nrich==15.0.0\n",
     "rich (Python 3.11) is not in the lock"),
    ("tenacity==9.2.1\n", "", "tenacity is locked for requirements.in, which no longer asks"),
    ('azure-functions==2.3.0; python_version >= "3.13"',
     'azure-functions==2.4.0; python_version >= "3.13"',
     "azure-functions (Python 3.13): requirements.in asks for ==2.4.0, the lock has 2.3.0"),
])
def test_a_requirements_txt_the_lock_does_not_match_is_caught(
        old: str, new: str, expected: str) -> None:
    text = (ROOT / "requirements.in").read_text()
    assert old in text, "the mutation no longer applies: update this test"
    problems = drift(text.replace(old, new, 1), LOCK.read_text())
    assert any(expected in p for p in problems), problems


def test_a_package_without_its_hashes_is_caught() -> None:
    lock = LOCK.read_text()
    entry = re.search(r"(?m)^httpx==0\.28\.1 \\\n(    --hash=\S+(?: \\)?\n)+", lock)
    assert entry, "the mutation no longer applies: update this test"
    stripped = lock.replace(entry.group(0), "httpx==0.28.1\n", 1)
    assert "httpx==0.28.1 has no hash" in drift((ROOT / "requirements.in").read_text(),
                                                stripped)


def test_make_installs_what_ships_from_the_lock_checking_hashes() -> None:
    """The demo's and CI's environments (and the newest Python's) take the shipped packages
    from the lock before anything else."""
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"LOCKED_INSTALL = --require-hashes \\\n\s+-r requirements.txt\n", make)
    # From the cache alone, else from the index: the lock with its hashes both ways.
    locked = re.search(r"(?m)^LOCKED = (.*\\\n)*.*\n", make)
    assert locked and locked.group(0).count("$(LOCKED_INSTALL)") == 2, locked
    for stamp in ("$(LOCAL_STAMP)", "$(NEWEST_STAMP)"):
        recipe = make.split(f"\n{stamp}:", 1)[1].split("\n\n", 1)[0]
        assert "requirements.txt" in recipe.splitlines()[0] + recipe.splitlines()[1]
        installs = [line for line in recipe.splitlines() if "$(UV_INSTALL)" in line
                    or "pip install" in line or "LOCKED" in line]
        assert "$(call LOCKED," in installs[0], stamp


def test_this_environment_runs_what_ships_at_the_versions_locked() -> None:
    """What `make` installed after the lock (the local host's, the CLI's, the test tooling)
    moved no shipped package: the tests run against what Azure will."""
    import sys
    from importlib.metadata import PackageNotFoundError, version

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    moved = []
    for e in lock_entries(LOCK.read_text()):
        if not _applies(e.marker, python):
            continue
        try:
            installed = version(e.name)
        except PackageNotFoundError:
            moved.append(f"{e.name} is not installed")
            continue
        if installed != e.version:
            moved.append(f"{e.name} {installed}, locked {e.version}")
    assert not moved, "; ".join(moved)
