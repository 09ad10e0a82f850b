"""The rooms of patcher/ (docs/design.md, "Rooms") and the imports between them, kept by the
code's own ast: every `import`/`from ... import` of every module, function-level ones included
(a lazy import is still a dependency). A change that makes the pure planner reach for a
transport, a transport reach for the spec models, or one command import another fails here with
the module and the line, long before a newcomer has to untangle it."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PATCHER = REPO / "patcher"

# Pure modules: they decide; they read no disk, start no process and open no socket.
CORE = {
    "patcher._compat",
    "patcher.errors",
    "patcher.result",
    "patcher.spec",
    "patcher.hostfacts",
    "patcher.plan",
    "patcher.capture",
    "patcher.udiff",
    "patcher.tomlpos",
    "patcher.linemerge",
    "patcher.inert",
    "patcher.rollout",
    "patcher.rolloutresume",
    "patcher.monitor",
    "patcher.names",
    "patcher.promtext",
    "patcher.pyast",
}
# What a pure module may not import from the standard library: the I/O edges.
IO_STDLIB = {
    "subprocess",
    "socket",
    "select",
    "shutil",
    "tempfile",
    "urllib",
    "http",
    "ssl",
    "threading",
    "concurrent",
    "multiprocessing",
    "asyncio",
}
# The one exception, argued: pyast takes a lock around CPython's parser (threads of the
# executors share its state before 3.13); a lock is no I/O, and it starts no thread.
CORE_MAY = {("patcher.pyast", "threading")}
# The C modules behind hashlib and json, which the agent imports directly to start cheaper
# (docs/design.md, "What an agent start costs the host"): standard library, private names.
PRIVATE_STDLIB = {"_sha2", "_sha256", "_json", "_hashlib"}


def module_name(path: Path) -> str:
    """The dotted module name of a file under the repository."""
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of patcher/, by dotted name."""
    return {module_name(p): p for p in sorted(PATCHER.rglob("*.py"))}


def imports(name: str, path: Path, text: str | None = None) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in a module, relative ones resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    source = path.read_text() if text is None else text
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            yield node.lineno, mod
            for alias in node.names:  # `from patcher import spec` imports patcher.spec
                if f"{mod}.{alias.name}" in ALL:
                    yield node.lineno, f"{mod}.{alias.name}"


ALL = modules()


def room(name: str) -> str:
    """Which room a patcher module lives in."""
    if name == "patcher" or name == "patcher.entry":
        return "entry"
    if name == "patcher.cli":
        return "cli"
    for prefix in ("agent", "transports", "commands", "rewrite"):
        if name == f"patcher.{prefix}" or name.startswith(f"patcher.{prefix}."):
            return "core" if prefix == "rewrite" else prefix
    return "core" if name in CORE else "executor"


def top(mod: str) -> str:
    """The top-level package of a dotted module name."""
    return mod.split(".")[0]


def _stdlib(mod: str) -> bool:
    """Whether `mod` is the standard library's (what the agent may import)."""
    return top(mod) in sys.stdlib_module_names or top(mod) in PRIVATE_STDLIB


def violations(sources: dict[str, str] | None = None) -> list[str]:
    """Every import that breaks a rule, as `module:line imports X (rule)`; `sources`: module
    texts to check instead of the files (the test of the checker itself)."""
    out: list[str] = []
    todo = (
        {n: (ALL[n], t) for n, t in sources.items()}
        if sources
        else {n: (p, None) for n, p in ALL.items()}
    )
    for name, (path, text) in todo.items():
        here = room(name)
        for line, mod in imports(name, path, text):
            where = f"{name}:{line} imports {mod}"
            inside = mod == "patcher" or mod.startswith("patcher.")
            there = room(mod) if inside else None
            if here == "agent":
                if inside and there != "agent":
                    out.append(f"{where} (the agent imports only stdlib and agent)")
                elif not inside and not _stdlib(mod):
                    out.append(f"{where} (the agent imports only stdlib and agent)")
            if there == "cli" and here != "entry":
                out.append(f"{where} (only entry imports cli)")
            if here == "core":
                if there in {"transports", "commands", "cli", "executor"}:
                    out.append(f"{where} (core imports no transport, command or executor)")
                if top(mod) in IO_STDLIB and (name, top(mod)) not in CORE_MAY:
                    out.append(f"{where} (core does no I/O)")
            if (
                here == "transports"
                and inside
                and there
                in {"commands", "cli", "executor"}
                | (
                    {"core"}
                    if mod in {"patcher.spec", "patcher.plan", "patcher.hostfacts"}
                    else set()
                )
            ):
                out.append(f"{where} (transports import no spec, plan, engine or command)")
            if (
                here == "commands"
                and there == "commands"
                and mod != "patcher.commands"
                and not mod.rpartition(".")[2].startswith("_")  # shared helpers, not commands
                and mod != name
            ):
                out.append(f"{where} (commands never import each other)")
    return out


def test_rooms_keep_their_rules() -> None:
    assert violations() == []


def test_the_rules_can_fail() -> None:
    """The checker sees what it must refuse: a planner that opens a transport, an agent that
    imports pydantic, a command importing another, a transport reading specs."""
    assert room("patcher.plan") == "core" and room("patcher.rewrite_cache") == "executor"
    assert room("patcher.commands._targets") == "commands" and room("patcher.entry") == "entry"
    bad = {
        "patcher.plan": "from patcher.transports import open_transport\nimport subprocess\n",
        "patcher.agent.facts": "import pydantic\nfrom patcher import spec\n",
        "patcher.commands.hosts": "from patcher.commands import matrix\n",
        "patcher.transports.ray": "from patcher.spec import PatchSpec\n",
        "patcher.engine": "from patcher import cli\n",
    }
    found = violations(bad)
    assert sorted({f.split(":")[0] for f in found}) == sorted(bad), found
    assert sum("(core does no I/O)" in f for f in found) == 1, found


def test_only_commands_choose_a_transport() -> None:
    """`transports.open_transport` chooses; only the commands call it (their target options):
    an executor is handed a Transport, or a factory the command made, never the choice."""
    choosers = []
    for name, path in ALL.items():
        if room(name) in {"transports", "commands"}:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("transports"):
                if {"open_transport", "Settings"} & {a.name for a in node.names}:
                    choosers.append(f"{name}:{node.lineno}")
    assert choosers == []


@pytest.mark.parametrize("name", sorted(ALL))
def test_module_size(name: str) -> None:
    """One module, one job: ~600 lines, except the planner, the capture algorithm and the spec
    schema (one decision, one algorithm, one schema)."""
    if name in {"patcher.plan", "patcher.capture", "patcher.spec"}:
        return
    lines = ALL[name].read_text().count("\n")
    assert lines <= 620, f"{name}: {lines} lines"


def test_only_pyast_calls_ast_parse() -> None:
    """Every parse of the controller takes pyast's lock: no other module of patcher/ outside
    the agent (which parses nothing) calls `ast.parse` itself."""
    found = []
    for name, path in ALL.items():
        if name == "patcher.pyast" or room(name) == "agent":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "parse"
                and isinstance(node.value, ast.Name)
                and node.value.id == "ast"
            ):
                found.append(f"{name}:{node.lineno}")
    assert found == []
