"""`patcher.authoring.capture` (pure): golden cases tests/cases/capture/*.json, each a pristine
text, a
hand-edited one and the edits capture must find (the finest op that fits), replayed."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from patcher._compat import tomllib
from patcher.authoring import sameast
from patcher.authoring.capture import CaptureError, capture, spec_toml
from patcher.rewrite import apply_edits
from patcher.specs.model import from_data
from tests.support.cases import EDIT

CASES = sorted((Path(__file__).resolve().parent.parent / "cases" / "capture").glob("*.json"))


def test_there_are_cases() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_golden(path: Path) -> None:
    case = json.loads(path.read_text("utf-8"))
    got = capture(case["pristine"], case["edited"], "pkg/m.py")
    assert got.edits == case["edits"], case["about"]
    if not got.edits:
        assert got.notes
        return
    rw = apply_edits(case["pristine"], [EDIT.validate_python(e) for e in got.edits])
    # the same tree, a run of imports counted by what it imports (patcher.authoring.sameast)
    assert sameast.dump(ast.parse(rw.source)) == sameast.dump(ast.parse(case["edited"]))
    assert (rw.source == case["edited"]) is case["bytes"], "same bytes where the ops keep layout"
    again = apply_edits(rw.source, [EDIT.validate_python(e) for e in got.edits])
    assert (again.status, again.source) == ("unchanged", rw.source), "a second run is a no-op"
    # the spec text carries exactly these edits
    text = spec_toml("x", "s", "pkg", "==1.0", [("pkg/m.py", got)])
    spec = from_data(tomllib.loads(text))
    [(rel, edits)] = spec.variant[0].files()
    assert rel == "pkg/m.py"
    dumped = [e.dumped for e in edits]
    assert dumped == [
        EDIT.validate_python({k: v for k, v in e.items() if k != "file"}).dumped for e in got.edits
    ]


def test_multi_file_spec_names_each_file() -> None:
    case = json.loads((CASES[0].parent / "value.json").read_text("utf-8"))
    a = capture(case["pristine"], case["edited"], "pkg/a.py")
    b = capture(case["pristine"], case["edited"], "pkg/b.py")
    spec = from_data(
        tomllib.loads(spec_toml("x", "s", "pkg", "==1.0", [("pkg/a.py", a), ("pkg/b.py", b)]))
    )
    assert [rel for rel, _ in spec.variant[0].files()] == ["pkg/a.py", "pkg/b.py"]
    assert spec.variant[0].file is None


def test_added_file_is_add_file() -> None:
    got = capture("", "X = 1\n", "pkg/new.py")
    assert got.edits == [{"op": "add_file", "file": "pkg/new.py", "text": "X = 1\n"}]


def test_code_with_triple_quotes_stays_exact() -> None:
    p = "def f():\n    return 1\n"
    e = p + "\n\ndef g():\n    '''doc'''\n    return \"\"\"x\"\"\"\n"
    got = capture(p, e, "m.py")
    spec = from_data(tomllib.loads(spec_toml("x", "s", "p", "==1", [("m.py", got)])))
    rw = apply_edits(p, spec.variant[0].edit)
    assert rw.source == e


def test_unparsable_edit_is_an_error() -> None:
    with pytest.raises(CaptureError, match="does not parse"):
        capture("x = 1\n", "x = (\n", "m.py")


def test_suggested_range_around_the_installed_release() -> None:
    from patcher.commands.authoring import suggest
    from patcher.wheels.matrix import Release

    rows = [
        Release("0.13.0", 0, "anchor_missing"),
        Release("0.14.1", 0, "would_apply"),
        Release("0.16.0", 0, "would_apply"),
        Release("0.17.0", 0, "anchor_missing"),
    ]
    assert suggest(rows, "0.16.0") == ">=0.14.1,<0.17.0"
    assert suggest(rows[1:3], "0.16.0") == ">=0.14.1,<=0.16.0"
    assert suggest(rows[2:], "0.16.0") is None


def test_source_segments_are_asts_own() -> None:
    """capture's segment (splitlines, once per call) is ast.get_source_segment's text for every
    node, multi-line and non-ASCII ones included, and for texts ast splits otherwise."""
    from patcher.authoring.capture import _segment

    for text in (
        'x = [\n    "é", 2,\n    {"k": (1,\n  2)}]\ny = f(a, b=3)  # ü\n',
        "a = 1\r\nb = [1,\r\n 2]\r\n",
        "a = 1\n\x0cb = [1,\n 2]\n",
        "a = 1\rb = (2,\r 3)\n",
    ):
        for node in ast.walk(ast.parse(text)):
            if hasattr(node, "lineno"):
                assert _segment(text, node) == ast.get_source_segment(text, node), (text, node)
