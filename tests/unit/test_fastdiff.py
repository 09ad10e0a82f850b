"""patcher.plan.fastdiff: difflib's unified format in near-linear time (issue 40 item 3).

The anchored path is forced (`small=0`) so every case here goes through it; difflib is the
reference. Where all lines are unique and the new side keeps the old side's order (lines
removed, lines added, none moved), the two must agree byte for byte; on any input the output
must be a diff that `patcher.authoring.udiff` applies back to the new text.
"""

from __future__ import annotations

import difflib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patcher.authoring import sysdiff, udiff
from patcher.plan import fastdiff


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


def test_no_unique_line_goes_to_the_system_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    """20k lines drawn from 150 (no line unique, difflib's worst case): the system's diff
    matches the stretch (patcher.authoring.sysdiff), SequenceMatcher is never asked to search it,
    and
    the diff turns the old text into the new."""
    if sysdiff.available() is None:
        pytest.skip("no system diff on this machine")
    rng = random.Random(5)
    vocab = [f"    x{i} = y{i % 17}\n" for i in range(150)]
    a = [rng.choice(vocab) for _ in range(20_000)]
    b = list(a)
    for i in rng.sample(range(20_000), 2_000):
        b[i] = f"    changed = {i % 97}\n"
    searched: list[int] = []

    class Recording(difflib.SequenceMatcher):  # type: ignore[type-arg]
        def get_matching_blocks(self) -> list[difflib.Match]:
            if self.matching_blocks is None:
                searched.append(len(self.a) * len(self.b))
            return super().get_matching_blocks()

    monkeypatch.setattr(fastdiff.difflib, "SequenceMatcher", Recording)
    text = "".join(fastdiff.unified_diff(a, b, "a/m.py", "b/m.py", matcher=sysdiff.matching_blocks))
    assert searched == []
    assert _patched(a, text) == b


def _patched(a: list[str], text: str) -> list[str]:
    """`a` with the diff's hunks applied at the lines their headers name (each old line
    checked): the diff's own positions, no search."""
    out: list[str] = []
    pos = 0
    lines = text.splitlines(keepends=True)[2:]
    for line in lines:
        if line.startswith("@@"):
            start = int(line.split()[1][1:].split(",")[0])
            count = line.split()[1].split(",")
            first = start - 1 if len(count) == 1 or count[1] != "0" else start
            out += a[pos:first]
            pos = first
        elif line[:1] in (" ", "-"):
            assert a[pos] == line[1:], (pos, line)
            pos += 1
            if line[:1] == " ":
                out.append(line[1:])
        else:
            out.append(line[1:])
    return out + a[pos:]


def test_diffs_normal_output_as_matching_blocks() -> None:
    """diff's change commands (a, c, d; single lines and ranges) leave these equal blocks."""
    out = b"2c2\n< x\n---\n> y\n4a5,6\n> n\n> m\n7,8d8\n< p\n< q\n"
    assert sysdiff.blocks_from_normal(out, 9, 9) == [(0, 0, 1), (2, 2, 2), (4, 6, 2), (8, 8, 1)]
    assert sysdiff.blocks_from_normal(b"", 3, 3) == [(0, 0, 3)]
    assert sysdiff.blocks_from_normal(b"garbage\n", 3, 3) is None
    assert sysdiff.blocks_from_normal(b"1d0\n< a\n", 3, 3) is None  # does not add up


def _changes(a: list[str], b: list[str]) -> list[int]:
    """difflib's own matching of a and b as from_changes takes it: i1 i2 j1 j2 per change."""
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [x for tag, *box in sm.get_opcodes() if tag != "equal" for x in box]


@settings(max_examples=300, deadline=None)
@given(
    a=st.lists(st.sampled_from(["x\n", "y\n", "\n", "z = 1\n", "w"]), max_size=60),
    b=st.lists(st.sampled_from(["x\n", "y\n", "\n", "z = 2\n", "w"]), max_size=60),
    n=st.integers(0, 5),
)
def test_from_changes_is_difflibs_text_of_the_same_matching(
    a: list[str], b: list[str], n: int
) -> None:
    """Given the changes of difflib's matching, the text is difflib's byte for byte: its
    grouping, context, ranges (any n); a last line without newline ("w") is followed by GNU
    diff's marker, as `unified_diff` writes it (difflib writes none). The lines are split as
    vpatch splits texts (`split_lines`: only a last line can lack a newline)."""
    a, b = fastdiff.split_lines("".join(a)), fastdiff.split_lines("".join(b))
    got = fastdiff.from_changes(a, b, _changes(a, b), "a/m.py", "b/m.py", n=n)
    assert got == "".join(fastdiff.unified_diff(a, b, "a/m.py", "b/m.py", n=n))
    if all(line.endswith("\n") for line in a + b):
        assert got == "".join(difflib.unified_diff(a, b, "a/m.py", "b/m.py", n=n))


def test_from_changes_refuses_numbers_that_are_not_the_changes() -> None:
    """The proof: whatever does not describe a -> b is refused, never written."""
    a = [f"l{i}\n" for i in range(40)]
    b = list(a)
    b[5] = "X\n"
    b[20:22] = ["Y\n"]
    good = [5, 6, 5, 6, 20, 22, 20, 21]
    assert fastdiff.from_changes(a, b, good, "a/m.py", "b/m.py") == _reference(a, b)
    for bad, why in (
        ([5, 6, 5, 6], "a change left out: the tails differ"),
        ([20, 22, 20, 21], "a change left out: the heads differ"),
        ([4, 6, 5, 6, 20, 22, 20, 21], "unchanged stretches of two lengths"),
        ([5, 6, 5, 6, 20, 22, 20, 21, 30, 30, 29, 29], "a change that changes nothing"),
        ([5, 6, 5, 6, 6, 7, 6, 7, 20, 22, 20, 21], "two changes with nothing between"),
        ([20, 22, 20, 21, 5, 6, 5, 6], "out of order"),
        ([5, 6, 5, 6, 20, 22, 20, 21, 39, 45, 38, 38], "past the end"),
        ([5, 6, 5, 6, 20, 22, 20], "not four numbers a change"),
        ([5, 4, 5, 6, 20, 22, 20, 21], "a change that ends before it starts"),
    ):
        assert fastdiff.from_changes(a, b, bad, "a/m.py", "b/m.py") is None, why
    c = list(a)
    c[12] = "hidden\n"  # differs between the two listed changes: only the check sees it
    c[5], c[20:22] = "X\n", ["Y\n"]
    assert fastdiff.from_changes(a, c, good, "a/m.py", "b/m.py") is None
    assert fastdiff.from_changes(a, a, [], "a/m.py", "b/m.py") == ""
    assert fastdiff.from_changes(a, b, [], "a/m.py", "b/m.py") is None
