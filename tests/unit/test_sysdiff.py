"""A big file's diff written by the system's `diff -u` (patcher.authoring.sysdiff.unified), used
only where `fastdiff.is_canonical` finds it byte for byte what vpatch writes itself: identical
to difflib on the cases difflib is the reference for, refused (and vpatch's own text used)
wherever a line, a range, the context or a hunk split differs."""

from __future__ import annotations

import difflib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patcher.authoring import handedit, sysdiff
from patcher.plan import fastdiff

pytestmark = pytest.mark.skipif(sysdiff.available() is None, reason="no system diff here")


def _reference(a: list[str], b: list[str]) -> str:
    return "".join(difflib.unified_diff(a, b, "a/m.py", "b/m.py"))


def _unified(a: list[str], b: list[str]) -> str | None:
    return sysdiff.unified("".join(a), "".join(b), a, b, "a/m.py", "b/m.py")


def _edited(size: int, edits: list[tuple[int, int, int]]) -> tuple[list[str], list[str]]:
    a = [f"line {i} = value({i})\n" for i in range(size)]
    b = list(a)
    for k, (pos, removed, added) in enumerate(edits):
        at = pos % (len(b) + 1)
        b[at : at + removed] = [f"new {k}.{m}\n" for m in range(added)]
    return a, b


@settings(max_examples=120, deadline=None)
@given(
    size=st.integers(0, 300),
    edits=st.lists(
        st.tuples(st.integers(0, 400), st.integers(0, 8), st.integers(0, 8)), max_size=20
    ),
)
def test_diff_u_is_difflibs_text_byte_for_byte(
    size: int, edits: list[tuple[int, int, int]]
) -> None:
    a, b = _edited(size, edits)
    want = _reference(a, b)
    assert _unified(a, b) == want
    assert fastdiff.is_canonical(a, b, want.splitlines(keepends=True), "a/m.py", "b/m.py")


def test_the_20k_line_module_is_diff_us_text_and_vpatchs() -> None:
    rng = random.Random(40)
    a = [f"    v{i} = compute(x, {i})\n" for i in range(20_000)]
    b = list(a)
    for i in rng.sample(range(20_000), 2_000):
        b[i] = a[i].rstrip("\n") + "  # changed\n"
    own = "".join(fastdiff.unified_diff(a, b, "a/m.py", "b/m.py"))
    assert _unified(a, b) == own


def _hunks() -> tuple[list[str], list[str], list[str]]:
    a = [f"l{i}\n" for i in range(40)]
    b = list(a)
    b[5] = "X\n"
    b[20:22] = ["Y\n"]
    return a, b, _reference(a, b).splitlines(keepends=True)


def test_every_way_a_diff_can_differ_is_refused() -> None:
    a, b, good = _hunks()
    assert fastdiff.is_canonical(a, b, good, "a/m.py", "b/m.py")
    assert good[2] == "@@ -3,7 +3,7 @@\n" and good[6] == "-l5\n" and good[7] == "+X\n"

    def refused(lines: list[str], fromfile: str = "a/m.py") -> bool:
        return not fastdiff.is_canonical(a, b, lines, fromfile, "b/m.py")

    assert refused(good, "a/other.py")  # another header
    assert refused([*good[:6], good[7], good[6], *good[8:]])  # '+' before '-'
    assert refused([*good[:3], " l3 \n", *good[4:]])  # a context line that is not the file's
    assert refused([*good[:2], "@@ -4,6 +4,6 @@\n", *good[4:]])  # two lines of context
    four = ["@@ -2,8 +2,8 @@\n", " l1\n", *good[3:]]
    assert refused([*good[:2], *four])  # four lines of context
    second = good.index("@@ -18,8 +18,7 @@\n")
    assert refused(good[:second])  # a change left out: the files' tails differ
    between = [f" l{i}\n" for i in range(9, 17)]
    merged = [*good[:2], "@@ -3,23 +3,22 @@\n", *good[3:second], *between, *good[second + 1 :]]
    assert len(merged) == len(good) - 1 + len(between)
    assert refused(merged)  # a valid diff, but two hunks written as one (8 lines between)
    assert refused([*good, "\\ No newline at end of file\n"])
    assert fastdiff.is_canonical(a, a, [], "a/m.py", "b/m.py")  # the same: no text at all
    assert refused([])


def test_texts_diff_splits_otherwise_are_not_sent_to_it() -> None:
    a = [f"l{i}\n" for i in range(10)]
    for b in (
        [*a[:-1], "l9"],  # no newline at the end
        [*a[:3], "form\x0cfeed\n", *a[4:]],  # splitlines breaks there, diff does not
        [*a[:3], "lone\rcr\n", *a[4:]],
    ):
        text = "".join(b)
        assert sysdiff.unified("".join(a), text, a, text.splitlines(True), "a/m", "b/m") is None
    assert sysdiff.unified("".join(a), "", a, [], "a/m\tx", "b/m") is None  # a label it quotes


def _file(before: str, after: str) -> handedit.FileDiff:
    return handedit.FileDiff("m.py", "/x/m.py", "modified", None, None, "wheel", before, after)


def test_vpatch_diff_of_a_big_file_is_the_system_diffs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fact behind the speed (no timing asserted): a big file's diff is diff -u's text,
    Python formats none of it; a small file's, and a big one diff cannot write, are vpatch's."""
    a = [f"v{i} = {i}\n" for i in range(3_000)]
    b = [f"w{i}\n" if i % 10 == 3 else line for i, line in enumerate(a)]
    want = "".join(fastdiff.unified_diff(a, b, "a/m.py", "b/m.py"))
    small_a, small_b = a[:50], b[:50]
    small_want = "".join(fastdiff.unified_diff(small_a, small_b, "a/m.py", "b/m.py"))

    def no_python(*args: object, **kwargs: object) -> object:
        raise AssertionError("formatted in Python")

    monkeypatch.setattr(fastdiff, "unified_diff", no_python)
    assert _file("".join(a), "".join(b)).diff == want
    monkeypatch.undo()
    asked: list[int] = []
    real = sysdiff.unified

    def counting(*args: object, **kwargs: object) -> str | None:
        asked.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sysdiff, "unified", counting)
    assert _file("".join(small_a), "".join(small_b)).diff == small_want
    assert asked == []
    no_eol = "".join(b).rstrip("\n")
    assert _file("".join(a), no_eol).diff == "".join(
        fastdiff.unified_diff(a, no_eol.splitlines(True), "a/m.py", "b/m.py")
    )
    assert asked == [1]
