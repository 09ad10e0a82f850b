"""The docs site's figures, as Graphviz text made from the code itself, so a drawing cannot drift
from what it draws; `docs/_hooks.py` renders each with `dot` (Debian's graphviz) into an SVG of
the built site, `figures/NAME.svg`, and a page shows one with `<!-- vpatch:figure-NAME -->`:

    rooms     patcher/'s folders and which imports which (read from every module's ast)
    apply     one host's apply: inspect, plan, commit, verify (the engine's exchanges)
    rollout   a host's rollout steps and the way back (walked through rollout.decide itself)

Text in, text out: nothing here starts `dot` or writes a file.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from patcher import pyast
from patcher.rollout import decide

PATCHER = Path(__file__).resolve().parents[1]
T = TypeVar("T")
# The look every figure shares: the theme's indigo, no web font (the site fetches nothing).
_HEAD = [
    'graph [fontname="Helvetica", fontsize=11, bgcolor="transparent", nodesep=0.25, ranksep=0.35]',
    'node [fontname="Helvetica", fontsize=11, shape=box, style="rounded,filled", '
    'fillcolor="#e8eaf6", color="#3f51b5"]',
    'edge [fontname="Helvetica", fontsize=9, color="#5c6bc0", arrowsize=0.7]',
]


def _graph(lines: list[str], *, rankdir: str = "TB") -> str:
    return "\n".join(["digraph G {", f"rankdir={rankdir}", *_HEAD, *lines, "}"]) + "\n"


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# ---------------------------------------------------------------------------------------------
# The rooms


def _room(module: str, root: Path) -> str:
    """`patcher.plan.apply` -> `plan`; a module at the top (`patcher.result`) -> `edge`."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "patcher":
        return ""
    return parts[1] if (root / parts[1]).is_dir() else "edge"


def _imported(tree: ast.AST, module: str) -> Iterator[str]:
    """Every patcher module `tree` (the module `module`) imports, function-level ones too."""
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)


def room_imports(root: Path = PATCHER) -> dict[str, set[str]]:
    """Room -> the other rooms its modules import (`edge`: the modules at the top)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("patcher", *path.relative_to(root).with_suffix("").parts))
        room = _room(module, root)
        targets = {_room(m, root) for m in _imported(pyast.parse(path.read_text()), module)}
        graph.setdefault(room, set()).update(t for t in targets if t and t != room)
    return graph


def _reach(graph: Mapping[T, set[T]], start: T) -> set[T]:
    seen: set[T] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), set()) - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def groups(graph: dict[str, set[str]]) -> list[set[str]]:
    """The rooms that import each other, directly or round a longer loop (the strongly
    connected sets of more than one room)."""
    reach = {room: _reach(graph, room) for room in graph}
    found: list[set[str]] = []
    for room in sorted(graph):
        group = {room} | {other for other in reach[room] if room in reach.get(other, set())}
        if len(group) > 1 and group not in found:
            found.append(group)
    return found


def reduced(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The arrows worth drawing: A -> C goes when A reaches C's group through another group
    (A -> B -> C says it); arrows inside a group, and into one group from A, all stay."""
    group_of = {room: frozenset({room}) for room in graph}
    for group in groups(graph):
        group_of.update({room: frozenset(group) for room in group})
    # the graph of the groups, each group one node
    outer: dict[frozenset[str], set[frozenset[str]]] = {}
    for room, targets in graph.items():
        here = group_of[room]
        outer.setdefault(here, set()).update(group_of.get(t, frozenset({t})) for t in targets)
        outer[here].discard(here)
    out: dict[str, set[str]] = {}
    for room, targets in graph.items():
        here = group_of[room]
        keep = set()
        for target in targets:
            there = group_of.get(target, frozenset({target}))
            others = outer.get(here, set()) - {there}
            if there == here or not any(there in _reach(outer, o) | {o} for o in others):
                keep.add(target)
        out[room] = keep
    return out


def rooms() -> str:
    """The folders of patcher/, each above the rooms it imports (an arrow another path of
    arrows implies is left out; rooms that import each other share a box); the edge modules
    every room may use (errors, result, ...) are left out, but for cli/entry, the process's
    way in."""
    graph = {k: v - {"edge"} for k, v in room_imports().items() if k != "edge"}
    drawn = reduced(graph)
    lines = [
        'entry [label="entry.py, cli.py", shape=oval, fillcolor="#c5cae9"]',
        "entry -> commands",
    ]
    for i, group in enumerate(groups(graph)):
        inner = " ".join(_q(r) for r in sorted(group))
        lines.append(
            f'subgraph cluster_{i} {{label=""; style="dashed,rounded"; color="#9fa8da"; {inner}}}'
        )
    for room in sorted(drawn):
        extra = ', fillcolor="#fff8e1"' if room == "agent" else ""
        lines.append(f'{_q(room)} [label="{room}/"{extra}]')
        lines += [f"{_q(room)} -> {_q(t)}" for t in sorted(drawn[room])]
    return _graph(lines)


# ---------------------------------------------------------------------------------------------
# One host's apply


# (node, what happens there), in the engine's order: one `inspect` exchange, the pure planner,
# one `commit` exchange that writes, checks and inspects again (patcher/run/engine.py).
_APPLY = [
    ("targets", "targets\ninventory, --host, --python, --ray"),
    ("transport", "transport: ssh, local or ray\npython -I, the agent on stdin"),
    ("inspect", "inspect\nRECORD, hashes, journal"),
    ("plan", "plan (pure)\noutcomes, writes, journal entries"),
    ("commit", "commit\nbackup, journal, atomic rename"),
    ("verify", "verify at --level\nhashes, import, probes"),
    ("report", "RunResult\n--json or tables, exit status"),
]


def apply_flow() -> str:
    """One host's `vpatch apply`: the controller's steps and the agent's two exchanges."""
    label = dict(_APPLY)
    lines = [f"{name} [label={_q(text)}]" for name, text in _APPLY if name != "plan"]
    lines.append(f'plan [label={_q(label["plan"])}, fillcolor="#fff8e1"]')
    lines += [
        'undo [label="the original bytes back\\nfrom the backup", fillcolor="#ffebee", '
        'color="#c62828"]',
        'subgraph cluster_look {label="agent exchange 1"; style="dashed,rounded"; '
        'color="#9fa8da"; fontsize=9; inspect}',
        'subgraph cluster_commit {label="agent exchange 2"; style="dashed,rounded"; '
        'color="#9fa8da"; fontsize=9; commit; verify; undo}',
    ]
    names = [name for name, _ in _APPLY]
    lines += [f"{a} -> {b} [weight=8]" for a, b in itertools.pairwise(names)]
    lines += [
        'plan -> report [label="nothing to write", style=dashed]',
        'verify -> undo [label="fails", color="#c62828", fontcolor="#c62828"]',
        "undo -> report",
    ]
    return _graph(lines)


# ---------------------------------------------------------------------------------------------
# A host's rollout


def rollout_edges() -> set[tuple[str, str, bool]]:
    """(from, to, ok) for every step rollout.decide can take, with every optional step on:
    each walk the machine allows, a step at a time, ending in its verdict (a failed gates
    step's way back ends in both of its words: rolled back, or not enough evidence)."""
    plan = decide.Plan(metrics=True, restart=True, health=True)
    edges: set[tuple[str, str, bool]] = set()
    walks: list[list[tuple[str, bool]]] = [[]]
    while walks:
        done = walks.pop()
        step = decide.next_step(plan, done)
        if step is None:
            last, ok = done[-1]
            edges.add((last, decide.verdict(done)[1], ok))
            edges.add((last, decide.verdict(done, undecided=True)[1], ok))
            continue
        if done:
            edges.add((done[-1][0], step, done[-1][1]))
        walks += [[*done, (step, True)], [*done, (step, False)]]
    return edges


def rollout() -> str:
    edges = rollout_edges()
    steps = [s for s in decide.STEPS if any(s in (a, b) for a, b, _ in edges)]
    ends = sorted({b for _, b, _ in edges} - set(steps))
    good = {decide.KEPT, decide.ROLLED_BACK, decide.NOT_ENOUGH_EVIDENCE}
    lines = [f"{_q(s)} [label={_q(s.replace('rollback_', ''))}]" for s in steps]
    for end in ends:
        fill = "#e8f5e9" if end in good else "#ffebee"
        lines.append(f'{_q(end)} [shape=oval, fillcolor="{fill}"]')
    for a, b, ok in sorted(edges):
        look = " [weight=8]" if ok else ' [label="fails", color="#c62828", fontcolor="#c62828"]'
        lines.append(f"{_q(a)} -> {_q(b)}{look}")
    return _graph(lines, rankdir="LR")


# name -> (the figure's words for a reader who cannot see it, its Graphviz text)
FIGURES: dict[str, tuple[str, Callable[[], str]]] = {
    "rooms": ("The rooms of patcher/ and which imports which", rooms),
    "apply": ("One host's apply: inspect, plan, commit, verify", apply_flow),
    "rollout": ("A host's rollout steps, the way back and the verdicts", rollout),
}


def image(name: str, base: str = "") -> str:
    """The Markdown of figure `name` on a page `base` (`../` per folder) below the site's root."""
    alt, _ = FIGURES[name]
    return f"![{alt}]({base}figures/{name}.svg)"
