"""patcher.fastdiff: difflib's unified format in near-linear time (issue 40 item 3).

The anchored path is forced (`small=0`) so every case here goes through it; difflib is the
reference. Where all lines are unique and the new side keeps the old side's order (lines
removed, lines added, none moved), the two must agree byte for byte; on any input the output
must be a diff that `patcher.udiff` applies back to the new text.
"""

from __future__ import annotations

import difflib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patcher import fastdiff, udiff


def _reference(a: list[str], b: list[str], n: int = 3) -> str:
    return "".join(difflib.unified_diff(a, b, "a/m.py", "b/m.py", n=n))


def _fast(a: list[str], b: list[str], n: int = 3) -> str:
    return "".join(fastdiff.unified_diff(a, b, "a/m.py", "b/m.py", n=n, small=0))


def _edited(size: int, edits: list[tuple[int, int, int]]) -> tuple[list[str], list[str]]:
    """Unique lines, then (position, removed, added) edits applied to a copy, in order."""
    a = [f"line {i} = value({i})\n" for i in range(size)]
    b = list(a)
    fresh = 0
    for pos, removed, added in edits:
        at = pos % (len(b) + 1)
        new = [f"new {fresh + k}\n" for k in range(added)]
        fresh += added
        b[at : at + removed] = new
    return a, b


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(0, 400),
    edits=st.lists(
        st.tuples(st.integers(0, 500), st.integers(0, 6), st.integers(0, 6)), max_size=25
    ),
    n=st.integers(0, 5),
)
def test_unique_lines_give_difflibs_output_byte_for_byte(
    size: int, edits: list[tuple[int, int, int]], n: int
) -> None:
    a, b = _edited(size, edits)
    assert _fast(a, b, n) == _reference(a, b, n)


def test_a_large_module_matches_difflib_and_is_not_quadratic() -> None:
    """20k unique lines, 2,000 of them changed: difflib's exact text, without its search
    (the anchored path runs SequenceMatcher only on the stretches between anchors)."""
    rng = random.Random(40)
    a = [f"    v{i} = compute(x, {i})\n" for i in range(20_000)]
    b = list(a)
    for i in rng.sample(range(20_000), 2_000):
        b[i] = f"    changed_{i} = other({i})\n"
    assert _fast(a, b) == _reference(a, b)


@settings(max_examples=200, deadline=None)
@given(
    a=st.lists(st.sampled_from(["x\n", "y\n", "\n", "    )\n", "z = 1\n", "def f():\n"])),
    b=st.lists(st.sampled_from(["x\n", "y\n", "\n", "    )\n", "z = 2\n", "def f():\n"])),
)
def test_repeated_lines_still_give_a_diff_that_applies(a: list[str], b: list[str]) -> None:
    """Lines that repeat may be matched differently from difflib, never wrongly: the diff
    turns the old text into the new one."""
    text = _fast(a, b)
    if a == b:
        assert text == ""
        return
    [patch] = udiff.parse(text)
    assert udiff.apply("".join(a), patch) == "".join(b)


def test_small_inputs_are_difflibs_own() -> None:
    a, b = ["a\n", "b\n", "b\n", "c\n"], ["b\n", "a\n", "b\n", "c\n"]
    got = "".join(fastdiff.unified_diff(a, b, "a/m.py", "b/m.py"))
    assert got == _reference(a, b)


def test_sequencematcher_sees_only_short_stretches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fact behind the speed (no timing asserted): on the 20k-line module SequenceMatcher
    matches only stretches between anchors, each a few line pairs; difflib alone would be
    asked to match all 20k x 20k."""
    sizes: list[int] = []

    class Recording(difflib.SequenceMatcher):  # type: ignore[type-arg]
        def get_matching_blocks(self) -> list[difflib.Match]:
            if self.matching_blocks is None:  # a search, not difflib's grouping of ours
                sizes.append(len(self.a) * len(self.b))
            return super().get_matching_blocks()

    monkeypatch.setattr(fastdiff.difflib, "SequenceMatcher", Recording)
    a = [f"    v{i} = compute(x, {i})\n" for i in range(20_000)]
    b = [f"    w{i}\n" if i % 10 == 3 else line for i, line in enumerate(a)]
    text = "".join(fastdiff.unified_diff(a, b, "a/m.py", "b/m.py"))
    assert text.count("\n-    v") == 2_000 and text.count("\n+    w") == 2_000
    assert sizes and max(sizes) <= 4, max(sizes)
