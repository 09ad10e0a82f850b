"""The rooms of patcher/ (docs/design.md, "Rooms") and the imports between them, kept by the
code's own ast: every `import`/`from ... import` of every module, function-level ones included
(a lazy import is still a dependency). A room is a folder; the edge modules (cli, entry, errors,
result, ...) sit at the top. A change that makes the pure planner reach for a transport, a
transport reach for the spec models, one command import another, a module outside the command
layer read argv, or two modules import each other fails here with the module and the line, long
before a newcomer has to untangle it."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PATCHER = REPO / "patcher"

# The rooms, one folder each, and the rooms each may import (besides itself and the edge).
# Read as layers: a room may import only rooms listed for it; nothing imports commands but
# commands and the edge, and nothing imports cli but entry.
MAY_IMPORT: dict[str, set[str]] = {
    "agent": set(),  # stdlib only (checked apart)
    "transports": {"agent"},
    "rewrite": {"specs"},
    "specs": {"output", "caches", "transports"},
    "plan": {"specs", "rewrite", "agent"},
    "caches": {"specs", "rewrite", "transports", "agent"},
    "output": {"specs", "agent"},
    "serving": {"specs", "agent", "transports", "output"},
    "authoring": {
        "specs",
        "plan",
        "rewrite",
        "wheels",
        "transports",
        "agent",
        "output",
        "caches",
        "run",
    },
    "inventory": {"specs", "transports", "output"},
    "wheels": {"specs", "plan", "rewrite", "transports", "agent", "output", "caches", "run"},
    # engine's status reads the rollout steps a journal holds (rollout.resume, pure)
    "run": {
        "specs",
        "plan",
        "rewrite",
        "caches",
        "output",
        "transports",
        "agent",
        "serving",
        "rollout",
    },
    "rollout": {"specs", "plan", "run", "serving", "output", "transports", "agent", "inventory"},
    "commands": {
        "agent",
        "authoring",
        "caches",
        "inventory",
        "output",
        "plan",
        "rewrite",
        "rollout",
        "run",
        "serving",
        "specs",
        "transports",
        "wheels",
    },
}
# The edge: the process's entry and the types every room shares.
EDGE = {"_compat", "errors", "exitcodes", "result", "pyast", "safewrite", "isolate", "suggest"}
# Pure modules: they decide; they read no disk, start no process and open no socket.
PURE_ROOMS = {"rewrite", "plan"}
PURE = {
    "patcher._compat",
    "patcher.errors",
    "patcher.result",
    "patcher.pyast",
    "patcher.specs.model",
    "patcher.specs.validate",
    "patcher.specs.names",
    "patcher.specs.tomlpos",
    "patcher.authoring.backport",
    "patcher.authoring.capture",
    "patcher.authoring.refusals",
    "patcher.authoring.sameast",
    "patcher.authoring.udiff",
    "patcher.output.inert",
    "patcher.rollout.decide",
    "patcher.rollout.resume",
    "patcher.rollout.events",
    "patcher.rollout.liveview",
    "patcher.serving.promtext",
    "patcher.serving.model",
    "patcher.serving.histogram",
    "patcher.serving.stats",
    "patcher.serving.sequential",
    "patcher.serving.measures",
    "patcher.serving.gates",
    "patcher.serving.judging",
}
# The one definition of the wire and of the journal, shared by controller and agent: data and
# parsing a pure module may use (journal.append writes only to a descriptor its caller holds).
SHARED = {"patcher.agent.protocol", "patcher.agent.journal"}
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
PURE_MAY = {("patcher.pyast", "threading")}
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


ALL = modules()


def imports(name: str, path: Path, text: str | None = None) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in a module, relative ones resolved; `from
    package import module` yields the module too (it is what gets imported)."""
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
            for alias in node.names:
                if f"{mod}.{alias.name}" in ALL:
                    yield node.lineno, f"{mod}.{alias.name}"


def room(name: str) -> str:
    """Which room a patcher module lives in: its folder, or the edge module's own name."""
    parts = name.split(".")
    if len(parts) == 1:
        return "entry"  # patcher/__init__.py
    if parts[1] in MAY_IMPORT:
        return parts[1]
    return parts[1]  # an edge module: cli, entry, errors, ...


def top(mod: str) -> str:
    """The top-level package of a dotted module name."""
    return mod.split(".")[0]


def _stdlib(mod: str) -> bool:
    """Whether `mod` is the standard library's (what the agent may import)."""
    return top(mod) in sys.stdlib_module_names or top(mod) in PRIVATE_STDLIB


def _pure(name: str) -> bool:
    return name in PURE or room(name) in PURE_ROOMS


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
                if (inside and there != "agent") or (not inside and not _stdlib(mod)):
                    out.append(f"{where} (the agent imports only stdlib and agent)")
                continue
            if top(mod) == "argparse" and here not in {"commands", "cli"}:
                out.append(f"{where} (only commands read argv)")
            if _pure(name):
                if inside and not _pure(mod) and there not in EDGE and mod not in SHARED:
                    if mod != f"patcher.{there}" and mod != "patcher":  # no code there
                        out.append(f"{where} (a pure module imports only pure ones)")
                if top(mod) in IO_STDLIB and (name, top(mod)) not in PURE_MAY:
                    out.append(f"{where} (a pure module does no I/O)")
            if not inside or there is None or there == here or mod == "patcher":
                continue
            if there == "cli" and here != "entry":
                out.append(f"{where} (only entry imports cli)")
            elif there == "commands" and here not in {"cli", "entry"}:
                out.append(f"{where} (only cli and entry import commands)")
            elif here in MAY_IMPORT and there in MAY_IMPORT and there not in MAY_IMPORT[here]:
                out.append(f"{where} ({here}/ may not import {there}/)")
            elif here in MAY_IMPORT and there not in MAY_IMPORT and there not in EDGE:
                out.append(f"{where} ({here}/ imports only rooms and the edge)")
        if here == "commands":
            for line, mod in imports(name, path, text):
                if (
                    mod.startswith("patcher.commands.")
                    and not mod.rpartition(".")[2].startswith("_")  # shared helpers
                    and mod != name
                ):
                    out.append(f"{name}:{line} imports {mod} (commands never import each other)")
    return out


# The rooms that write for people; every other module says its lines through
# patcher.output.lines (put, warning, note), where host text is made inert.
PRINTERS = {"commands", "output"}


def prints(sources: dict[str, str] | None = None) -> list[str]:
    """Every call of the builtin `print` outside the printing rooms, as `module:line`;
    `sources`: module texts to check instead of the files (the test of the checker itself)."""
    found: list[str] = []
    todo = sources if sources is not None else {n: p.read_text() for n, p in ALL.items()}
    for name, text in todo.items():
        if room(name) in PRINTERS:
            continue
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "print"
            ):
                found.append(f"{name}:{node.lineno}")
    return found


def _typing_only(path: Path) -> set[int]:
    """The lines of the imports under `if TYPE_CHECKING:`: annotations only (every module has
    `from __future__ import annotations`), never run, so no import cycle can go through them."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for sub in node.body:
                for inner in ast.walk(sub):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        lines.add(inner.lineno)
    return lines


def graph(annotations: bool = False) -> dict[str, set[str]]:
    """module -> the patcher modules it imports when it runs (function-level imports included,
    annotation-only ones under TYPE_CHECKING left out unless `annotations`)."""
    edges: dict[str, set[str]] = {}
    for name, path in ALL.items():
        typing_only = set() if annotations else _typing_only(path)
        found = {
            mod
            for line, mod in imports(name, path)
            if mod in ALL and mod != name and line not in typing_only
        }
        # `import patcher.x.y` also imports the packages above it, which hold no code
        edges[name] = {m for m in found if not ALL[m].name == "__init__.py" or m == "patcher"}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def test_rooms_keep_their_rules() -> None:
    assert violations() == []


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or around a longer circle (lazy imports
    count, the agent's included): a circle is one module in two files."""
    assert cycles(graph()) == []


def test_no_import_cycles_even_through_annotations() -> None:
    """Nor through the imports only a type checker reads: a type named in a module that
    imports the namer is the same concept living in two rooms (a `Settings` defined by the
    executor that the options' readers annotate with)."""
    assert cycles(graph(annotations=True)) == []


def test_the_cycle_finder_can_fail() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_has_a_room() -> None:
    """A module is in a room's folder or is one of the edge's few files: a new flat module
    must choose its room."""
    flat = {n.split(".")[1] for n in ALL if n.count(".") == 1 and ALL[n].name != "__init__.py"}
    flat -= set(MAY_IMPORT)
    assert flat == EDGE | {"cli", "entry"}, sorted(flat)


def test_the_rules_can_fail() -> None:
    """The checker sees what it must refuse: a planner that opens a transport, an agent that
    imports pydantic, a command importing another, a transport reading specs, a walk reading
    argv, a room reaching up into the commands."""
    assert room("patcher.plan.apply") == "plan" and room("patcher.caches.rewrites") == "caches"
    assert room("patcher.commands._targets") == "commands" and room("patcher.entry") == "entry"
    bad = {
        "patcher.plan.apply": "from patcher.transports import open_transport\nimport socket\n",
        "patcher.agent.facts": "import pydantic\nfrom patcher.specs import model\n",
        "patcher.commands.hosts": "from patcher.commands import matrix\n",
        "patcher.transports.ray": "from patcher.specs.model import PatchSpec\n",
        "patcher.run.engine": "from patcher import cli\n",
        "patcher.rollout.walk": "import argparse\n",
        "patcher.specs.catalog": "from patcher.commands import _targets\n",
    }
    found = violations(bad)
    assert sorted({f.split(":")[0] for f in found}) == sorted(bad), found
    assert sum("(a pure module does no I/O)" in f for f in found) == 1, found


def test_only_commands_and_output_print() -> None:
    """A print in a room below the commands writes past the output room: host text unmade
    inert, a line a `--json` run or a test's capture does not expect."""
    assert prints() == []


def test_the_print_rule_can_fail() -> None:
    bad = {
        "patcher.rollout.walk": "print('x')\n",
        "patcher.cli": "import sys\n\nprint('x', file=sys.stderr)\n",
        "patcher.output.lines": "print('x')\n",  # the output room may
        "patcher.commands.hosts": "print('x')\n",  # and so may the commands
        "patcher.wheels.pipconf": "S = 'print(1)'\nout.write('x')\n",  # no call of print
    }
    assert prints(bad) == ["patcher.rollout.walk:1", "patcher.cli:3"]


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
    """One module, one job: at most 600 lines, except the capture algorithm and the spec
    schema's pydantic models (one algorithm, one schema)."""
    if name in {"patcher.authoring.capture", "patcher.specs.validate"}:
        return
    lines = ALL[name].read_text().count("\n")
    assert lines <= 600, f"{name}: {lines} lines"


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


def test_record_builders_take_keywords_only() -> None:
    """A journal entry or a matrix has many fields of one type (`str | None`): a swapped
    positional argument would still type-check, so their builders take keywords only."""
    import inspect

    from patcher.agent import protocol
    from patcher.wheels import matrix

    for fn, positional in (
        (protocol.apply_entry, 0),
        (protocol.step_entry, 0),
        (matrix.build, 1),
    ):
        kinds = [p.kind for p in inspect.signature(fn).parameters.values()]
        assert kinds[:positional] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * positional
        assert set(kinds[positional:]) == {inspect.Parameter.KEYWORD_ONLY}, fn


def aliases(sources: dict[str, str]) -> list[str]:
    """`file:line` of every import of vpatch's own code under another name (`import X as Y`,
    `from X import Y as Z`): a name kept alive past a move, or one concept under two names,
    is found by grepping for neither. `sources`: relative path -> text."""
    found = []
    for rel, text in sources.items():
        for node in ast.walk(ast.parse(text, rel)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("patcher"):
                bad = [a for a in node.names if a.asname and a.asname != a.name]
            elif isinstance(node, ast.Import):
                bad = [a for a in node.names if a.name.startswith("patcher") and a.asname]
            else:
                continue
            found += [f"{rel}:{node.lineno} ({a.name} as {a.asname})" for a in bad]
    return found


def test_no_import_renames_vpatch_code() -> None:
    tops = ("patcher", "tests", "bench", "ansible_collections", "docs")
    files = [p for top in tops for p in (REPO / top).rglob("*.py") if "cases" not in p.parts]
    assert aliases({str(p.relative_to(REPO)): p.read_text() for p in files}) == []


def test_the_alias_rule_can_fail() -> None:
    planted = {
        "a.py": "from patcher.rollout import decide as rollout\nimport patcher.agent as agent\n",
        "b.py": "from patcher.rollout import decide\nimport numpy as np\n",
    }
    assert aliases(planted) == [
        "a.py:1 (decide as rollout)",
        "a.py:2 (patcher.agent as agent)",
    ]
