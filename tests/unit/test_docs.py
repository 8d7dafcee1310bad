"""The docs drift check: what the README and docs/*.md tell a reader to type, or name, exists.

Like the contracts drift check (tests/unit/test_contracts.py), the docs are held to the code:
every `make` target and variable, every `orders` command and option, every `python -m localrun`
command and option, every app setting, every repository path named in code and every relative
link (to a heading, where it names one). Commands are read from code spans and shell blocks;
a name that is wrong fails here with the page it is on, instead of failing a reader.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import typer

from shared.settings import Settings, limit_setting_names, service_setting_names
from shared.workflows import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
# Pages being written by others: a link to them may stand before they land. Only these.
NOT_YET_WRITTEN = {"docs/security.md", "docs/bill.md"}
# The hypothetical service of docs/adapting.md's walk-through: its settings are examples.
EXAMPLE_SERVICES = {"fraud"}
# Look like app settings, are not: each is named in the code (checked below), for a reason.
NOT_SETTINGS = {
    "OverdueSeconds": "a field of GET /api/overview's in-flight orders",
    "UseDevelopmentStorage": "the value AzureWebJobsStorage takes for Azurite",
}
# Upper-case words in commands that stand for what the reader fills in.
PLACEHOLDERS = {"ORDER_ID"}
SETTING_SUFFIXES = ("QueueName", "TableName", "Seconds", "Threshold", "Schedule", "Url", "Uri",
                    "Rate", "Ms", "Enabled", "AllowList", "InstanceId", "ServiceKey", "PerTick",
                    "Failures", "Connection", "Storage")
REPO_DIRS = ("shared", "tests", "localrun", "orderctl", "infra", "schemas", "docs",
             "servicebus-emulator", ".ci", ".vscode")
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}


@dataclass(frozen=True)
class Page:
    path: Path
    text: str

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix()


def pages() -> list[Page]:
    return [Page(p, p.read_text()) for p in
            [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]


_FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.S | re.M)
_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def prose(text: str) -> str:
    """The page without its fenced blocks (headings and links in them are not the page's)."""
    return _FENCE.sub("", text)


def code(text: str) -> Iterator[str]:
    """Every shell block and code span, as it would be typed (a span may wrap a line)."""
    for lang, body in _FENCE.findall(text):
        if lang in SHELL_LANGUAGES:
            yield body
    for span in _SPAN.findall(prose(text)):
        yield span.replace("\\|", "|").replace("\n", " ")


_OPERATORS = {"|", "||", "&", "&&", ";", "(", ")", "$(", "<", ">", ">>"}


def commands(snippet: str) -> Iterator[list[str]]:
    """The simple commands of a snippet: tokens split at pipes, lists and substitutions, with
    leading VAR=value assignments and optional [brackets] dropped."""
    for line in snippet.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:  # an unbalanced quote in prose-like code: not a command
            continue
        current: list[str] = []
        for token in [*tokens, ";"]:
            if token in _OPERATORS or set(token) <= set("|&;()<>$"):
                while current and re.fullmatch(r"[A-Za-z_]\w*=.*", current[0]):
                    current.pop(0)
                if current:
                    yield [t.strip("[]") for t in current]
                current = []
            else:
                current.append(token)


def named(tokens: list[str], prog: str) -> list[str] | None:
    """The arguments after ``prog`` when the command runs it (as a script, or python -m)."""
    if tokens[0] in (prog, f".venv/bin/{prog}"):
        return tokens[1:]
    if len(tokens) >= 3 and Path(tokens[0]).name.startswith("python") and tokens[1] == "-m" \
            and tokens[2] == prog:
        return tokens[3:]
    return None


# --- what exists ---

@cache
def make_targets() -> tuple[set[str], set[str]]:
    """The Makefile's targets and the variables it reads."""
    text = (ROOT / "Makefile").read_text()
    targets: set[str] = set()
    for line in text.splitlines():
        m = re.match(r"^([^\s#=:][^=:]*):(?![=])", line)
        if m and "$" not in m.group(1):
            targets.update(t for t in m.group(1).split() if not t.startswith("."))
    variables = set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text)) | set(
        re.findall(r"^([A-Z][A-Z0-9_]*)\s*[?:]?=", text, re.M))
    return targets, variables


@dataclass(frozen=True)
class Cli:
    """A command line's options: ``options[None]`` are the global ones; flags take no value."""
    options: dict[str | None, set[str]]
    flags: set[str]


@cache
def orders_cli() -> Cli:
    from orderctl.main import app

    # Typer's own click (typer._click): read by what every command and option has.
    group = typer.main.get_command(app)
    subcommands: dict[str, Any] = getattr(group, "commands")  # noqa: B009

    def options(cmd: Any) -> list[Any]:
        # A group's (orders alerts, orders redrives) with its own commands' beside its own.
        inner = getattr(cmd, "commands", {}) if cmd is not group else {}
        return [p for c in (cmd, *inner.values()) for p in c.params
                if p.param_type_name == "option"]

    flags = {o for cmd in (group, *subcommands.values()) for p in options(cmd) if p.is_flag
             for o in p.opts}
    by_command: dict[str | None, set[str]] = {
        name: {o for p in options(cmd) for o in (*p.opts, *p.secondary_opts)} | {"--help"}
        for name, cmd in [(None, group), *subcommands.items()]}
    return Cli(by_command, flags | {"--help"})


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def parser_of(main: Callable[[list[str]], int], argv: list[str]) -> argparse.ArgumentParser:
    """The parser a tool's main() builds, caught as it parses (nothing is run)."""
    def caught(self: argparse.ArgumentParser, *_: object, **__: object) -> None:
        raise _Parsed(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", caught), \
            pytest.raises(_Parsed) as parsed:
        main(argv)
    return parsed.value.parser


def _options(parser: argparse.ArgumentParser) -> tuple[set[str], set[str]]:
    actions = parser._actions
    return ({o for a in actions for o in a.option_strings},
            {o for a in actions if a.nargs == 0 for o in a.option_strings})


@cache
def localrun_cli() -> Cli:
    from localrun import demo
    from localrun.__main__ import main
    from localrun.bench import bench
    from localrun.rolling import rolling

    top = parser_of(main, ["host"])
    (sub,) = (a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    parsers = dict(sub.choices)
    parsers["demo"] = parser_of(demo.main, [])
    parsers["bench"] = parser_of(bench.main, [])
    parsers[".rolling"] = parser_of(rolling.main, [])  # python -m localrun.rolling
    options: dict[str | None, set[str]] = {}
    flags: set[str] = set()
    for name, parser in parsers.items():
        options[name], f = _options(parser)
        flags |= f
    return Cli(options, flags)


@cache
def settings() -> set[str]:
    """Every app setting: the code's (shared/settings.py, each registered service's and each
    code service's declared ones), the local template's, and the Bicep's app settings."""
    known = {f.alias for f in Settings.model_fields.values() if f.alias}
    known |= {n for s in REGISTRY.services for n in service_setting_names(s)}
    known |= {n for c in REGISTRY.code_services.values() for n in c.settings}
    known |= set(json.loads((ROOT / "local.settings.template.json").read_text())["Values"])
    for bicep in (ROOT / "infra").rglob("*.bicep"):
        known |= set(re.findall(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*:", bicep.read_text(), re.M))
    return known


@cache
def source_text() -> str:
    """What the repository holds besides its docs: where an environment variable, a constant or
    a field a page names must appear."""
    files = [p for d in ("shared", "localrun", "orderctl", "tests", "infra", ".ci")
             for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".bicep", ".json", ".html", "")
             and p.is_file() and p != Path(__file__) and "fixtures" not in p.parts
             and "__pycache__" not in p.parts]
    files += [ROOT / f for f in ("Makefile", "function_app.py", "docker-compose.yml", "host.json",
                                 "azure.yaml", "local.settings.template.json")]
    return "\n".join(p.read_text(errors="replace") for p in files)


# --- the checks: each returns what is wrong, page by page ---

def wrong_make(page: Page) -> list[str]:
    targets, variables = make_targets()
    out = []
    for snippet in code(page.text):
        for cmd in commands(snippet):
            if cmd[0] != "make":
                continue
            for arg in cmd[1:]:
                if "=" in arg:
                    if arg.split("=")[0] not in variables:
                        out.append(f"`make ... {arg}`: the Makefile reads no {arg.split('=')[0]}")
                elif not arg.startswith("-") and arg not in targets:
                    out.append(f"`make {arg}`: no such target in the Makefile")
    return out


def _wrong_options(label: str, args: list[str], options: set[str], flags: set[str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.startswith("--"):
            opt = arg.split("=")[0]
            if opt not in options:
                out.append(f"`{label} {opt}`: no such option")
            skip = "=" not in arg and opt not in flags
    return out


def wrong_orders(page: Page) -> list[str]:
    cli = orders_cli()
    out = []
    for snippet in code(page.text):
        for cmd in commands(snippet):
            args = named(cmd, "orders")
            if args is None:
                args = named(cmd, "orderctl")
            if not args:
                continue
            i = 0
            while i < len(args) and args[i].startswith("--"):  # global options first
                if args[i].split("=")[0] not in cli.options[None]:
                    out.append(f"`orders {args[i]}`: no such global option")
                i += 1 if "=" in args[i] or args[i] in cli.flags else 2
            if i >= len(args):
                continue
            sub = args[i]
            if sub not in cli.options:
                out.append(f"`orders {sub}`: no such command")
                continue
            out += _wrong_options(f"orders {sub}", args[i + 1:], cli.options[sub], cli.flags)
    return out


def wrong_localrun(page: Page) -> list[str]:
    cli = localrun_cli()
    out = []
    for snippet in code(page.text):
        for cmd in commands(snippet):
            rolling = named(cmd, "localrun.rolling")
            if rolling is not None:
                out += _wrong_options("python -m localrun.rolling", rolling,
                                      cli.options[".rolling"], cli.flags)
                continue
            args = named(cmd, "localrun")
            if not args:
                continue
            if args[0] not in cli.options:
                out.append(f"`python -m localrun {args[0]}`: no such command")
                continue
            out += _wrong_options(f"python -m localrun {args[0]}", args[1:],
                                  cli.options[args[0]], cli.flags)
    return out


_PER_SERVICE = re.compile(r"<Service>([A-Za-z]+)")
_WORD = re.compile(r"(?<![\w.])[A-Za-z][A-Za-z0-9_]*")


def _setting_like(word: str, known: set[str]) -> bool:
    if not word[0].isupper() or word.isupper() or ("__" not in word and "_" in word):
        return False
    return ("__" in word or word.lower().endswith(tuple(x.lower() for x in SETTING_SUFFIXES))
            or bool(difflib.get_close_matches(word, known, n=1, cutoff=0.9)))


def wrong_settings(page: Page) -> list[str]:
    known = settings()
    # The convention's suffixes: service "x" has settings "X<suffix>".
    per_service = {n.removeprefix("X") for n in (*service_setting_names("x"),
                                                  *limit_setting_names("x"))}
    examples = {n for s in EXAMPLE_SERVICES
                for n in (*service_setting_names(s), *limit_setting_names(s))}
    out = []
    for snippet in code(page.text):
        for suffix in _PER_SERVICE.findall(snippet):
            if suffix not in per_service:
                out.append(f"`<Service>{suffix}`: no per-service setting ends so "
                           f"(they are <Service>{' and <Service>'.join(sorted(per_service))})")
        for word in _WORD.findall(_PER_SERVICE.sub("", snippet)):
            if word.isupper() and "_" in word:  # an environment variable or a constant
                if word not in PLACEHOLDERS and word not in source_text():
                    out.append(f"`{word}`: nothing in the code, the Bicep or the tools reads it")
            elif _setting_like(word, known) and word not in known | examples \
                    and word not in NOT_SETTINGS:
                out.append(f"`{word}`: no such app setting (shared/settings.py, the template, "
                           "the Bicep)")
    return out


_DIRS = "|".join(map(re.escape, REPO_DIRS))
_PATH = re.compile(rf"(?<![\w./-])((?:{_DIRS})/[\w./<>-]*)")


def wrong_paths(page: Page) -> list[str]:
    out = []
    for snippet in code(page.text):
        for path in _PATH.findall(snippet):
            if "<" in path or "*" in path:
                continue
            path = path.rstrip(".")
            if not (ROOT / path).exists() and path not in NOT_YET_WRITTEN:
                out.append(f"`{path}`: no such file or folder")
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", prose(text), re.M):
        s = slug(heading)
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def wrong_links(page: Page) -> list[str]:
    out = []
    for target in _LINK.findall(_SPAN.sub("", prose(page.text))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.path.parent / path).resolve() if path else page.path
        rel = file.relative_to(ROOT).as_posix() if file.is_relative_to(ROOT) else str(file)
        if not file.exists():
            if rel not in NOT_YET_WRITTEN:
                out.append(f"[{target}]: no file {rel}")
            continue
        if anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            out.append(f"[{target}]: {rel} has no heading #{anchor}")
    return out


CHECKS = [wrong_make, wrong_orders, wrong_localrun, wrong_settings, wrong_paths, wrong_links]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_what_the_docs_name_exists(check: Callable[[Page], list[str]]) -> None:
    problems = [f"{page.name}: {p}" for page in pages() for p in check(page)]
    assert not problems, "\n".join(problems)


def test_the_names_kept_apart_from_settings_are_in_the_code() -> None:
    # So the list cannot hide a field that was removed.
    assert [n for n in NOT_SETTINGS if n not in source_text()] == []


# --- each check catches what it is for: a page with one name broken ---

def _mutated(old: str, new: str) -> tuple[Page, Page]:
    page = next(p for p in pages() if old in p.text)
    return page, Page(page.path, page.text.replace(old, new, 1))


@pytest.mark.parametrize(("check", "old", "new"), [
    (wrong_make, "make demo", "make demonstrate"),
    (wrong_make, "make demo ORDERS=500", "make demo ORDER=500"),
    (wrong_orders, "orders send --local --count 3", "orders send --local --number 3"),
    (wrong_orders, "orders status ORDER_ID", "orders show ORDER_ID"),
    (wrong_orders, "orders --account", "orders --acount"),
    (wrong_localrun, "python -m localrun host --create-resources",
     "python -m localrun host --create-resource"),
    (wrong_localrun, "python -m localrun bench --prices", "python -m localrun benchmark --prices"),
    (wrong_settings, "`SupervisorMaxRecoveriesPerTick`", "`SupervisorMaxRecoveryPerTick`"),
    (wrong_settings, "`InventoryServiceUrl`", "`InventoryServiceURL`"),
    (wrong_settings, "`<Service>ServiceUrl`", "`<Service>Url`"),
    (wrong_settings, "`OTEL_TRACES_EXPORTER`", "`OTEL_TRACE_EXPORTER`"),
    (wrong_paths, "`shared/domain/provenance.py`", "`shared/domain/order.py`"),
    (wrong_links, "(docs/architecture.md)", "(docs/architecture-overview.md)"),
    (wrong_links, "(architecture.md#an-agent-does-only-what-was-asked)",
     "(architecture.md#an-agent-does-what-was-asked)"),
])
def test_each_check_catches_a_broken_name(check: Callable[[Page], list[str]], old: str,
                                          new: str) -> None:
    page, broken = _mutated(old, new)
    assert check(page) == []
    assert check(broken) != []
