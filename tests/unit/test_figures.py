"""The docs site's figures (patcher/commands/_figures.py) say what the code does: the rooms'
arrows are the modules' imports, the rollout's arrows are the steps rollout.decide takes; and
Graphviz draws each (tests/integration/test_site.py sees them in the built site)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from patcher.commands import _docgen, _figures
from patcher.rollout import decide


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), set()) - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_room_imports_are_the_modules_imports(tmp_path: Path) -> None:
    """Absolute, `from patcher import x`, relative and function-level imports all count; a
    module at the top is the edge."""
    for room in ("a", "b", "c"):
        (tmp_path / room).mkdir()
        (tmp_path / room / "__init__.py").write_text("")
    (tmp_path / "errors.py").write_text("")
    (tmp_path / "a" / "one.py").write_text(
        "import patcher.b.x\nfrom patcher import errors\ndef f():\n    from patcher.c import y\n"
    )
    (tmp_path / "b" / "x.py").write_text("from . import y\nfrom ..c import z\nimport os\n")
    graph = _figures.room_imports(tmp_path)
    assert graph["a"] == {"b", "c", "edge"} and graph["b"] == {"c"} and graph["c"] == set()
    assert graph["edge"] == set()


def test_reduced_keeps_who_reaches_whom() -> None:
    assert _figures.reduced({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == {
        "a": {"b"},
        "b": {"c"},
        "c": set(),
    }
    # a loop (b <-> c) is a group: its arrows stay, and so do all of a's arrows into it
    loop = {"a": {"b", "c", "d"}, "b": {"c", "d"}, "c": {"b"}, "d": set()}
    assert _figures.groups(loop) == [{"b", "c"}]
    assert _figures.reduced(loop) == {"a": {"b", "c"}, "b": {"c", "d"}, "c": {"b"}, "d": set()}
    real = {k: v - {"edge"} for k, v in _figures.room_imports().items() if k != "edge"}
    drawn = _figures.reduced(real)
    for room in real:
        assert _reach(drawn, room) == _reach(real, room), room
    assert len(real["commands"]) >= 10 and real["agent"] == set()
    assert sum(map(len, drawn.values())) < sum(map(len, real.values()))


def test_rollout_figure_is_the_step_machine() -> None:
    edges = _figures.rollout_edges()
    ok = {(a, b) for a, b, good in edges if good}
    failed = {(a, b) for a, b, good in edges if not good}
    assert ("baseline", "apply") in ok and ("gates", "kept") in ok
    assert ("rollback_health", "rolled_back") in ok
    assert ("baseline", "untouched") in failed and ("apply", "not_applied") in failed
    assert {(s, "rollback") for s in ("restart", "health", "window", "gates")} <= failed
    assert {(s, "attention") for s in decide.Plan(True, True, True).back()} <= failed
    assert {a for a, _, _ in edges} == set(decide.STEPS)
    # every verdict of the step machine (changed_since is --resume's, interrupted a Ctrl-C's,
    # promoted and aborted its owner's steers': patcher/rollout/steer.py)
    ends = set(decide.VERDICTS) - {"interrupted", "changed_since", "promoted", "aborted"}
    assert {b for _, b, _ in edges} - set(decide.STEPS) == ends
    assert ("rollback_health", "not_enough_evidence") in ok


def test_every_figure_is_drawn_by_graphviz_and_linked_by_its_marker() -> None:
    dot = shutil.which("dot")
    assert dot, "Graphviz is needed (Debian: apt-get install graphviz; make test-deps)"
    for name, (alt, make) in _figures.FIGURES.items():
        done = subprocess.run([dot, "-Tsvg"], input=make(), capture_output=True, text=True)
        assert done.returncode == 0 and done.stderr == "", (name, done.stderr)
        assert done.stdout.rstrip().endswith("</svg>"), name
        image = _docgen.expand(f"<!-- vpatch:figure-{name} -->", "../")
        assert image == f"![{alt}](../figures/{name}.svg)"
    broken = subprocess.run([dot, "-Tsvg"], input="digraph {", capture_output=True, text=True)
    assert broken.returncode != 0, "dot must fail on bad text: the check above can fail"
