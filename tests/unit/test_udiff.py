"""`patcher.authoring.udiff` (pure): unified diffs parsed and applied the way `vpatch backport`
needs."""

from __future__ import annotations

import difflib

import pytest

from patcher.authoring import udiff

OLD = "".join(f"line {i}\n" for i in range(1, 31))


def make(old: str, new: str, a: str = "a/pkg/m.py", b: str = "b/pkg/m.py") -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=a, tofile=b
        )
    )


def test_git_paths_and_two_hunks_round_trip() -> None:
    new = OLD.replace("line 3\n", "line 3\nadded\n").replace("line 25\n", "")
    [fp] = udiff.parse("diff --git a/pkg/m.py b/pkg/m.py\nindex 1..2 100644\n" + make(OLD, new))
    assert fp.rel == "pkg/m.py" and len(fp.hunks) == 2
    assert udiff.apply(OLD, fp) == new


def test_hunks_are_placed_where_their_lines_are_when_the_file_moved() -> None:
    new = OLD.replace("line 20\n", "line 20\nfix\n")
    [fp] = udiff.parse(make(OLD, new))
    moved = "header\n" * 7 + OLD  # the release has 7 more lines on top
    assert udiff.apply(moved, fp) == "header\n" * 7 + new


def test_a_hunk_that_cannot_be_placed_is_named() -> None:
    new = OLD.replace("line 20\n", "line 20\nfix\n")
    [fp] = udiff.parse(make(OLD, new))
    with pytest.raises(
        udiff.PatchError, match=r"pkg/m.py: hunk 1 \(@@ -18,6 \+18,7 @@\) does not apply"
    ):
        udiff.apply(OLD.replace("line 19\n", "other\n"), fp)


def test_new_file_and_bare_paths() -> None:
    [fp] = udiff.parse(make("", "X = 1\n", a="/dev/null", b="pkg/new.py"))
    assert fp.old_path is None and fp.rel == "pkg/new.py"
    assert udiff.apply("", fp) == "X = 1\n"


def test_no_newline_at_end() -> None:
    old, new = "a\nb\n", "a\nc"
    text = "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n\\ No newline at end of file\n"
    [fp] = udiff.parse(text)
    assert udiff.apply(old, fp) == new


def test_not_a_diff() -> None:
    with pytest.raises(udiff.PatchError, match="no file"):
        udiff.parse("hello\n")
    with pytest.raises(udiff.PatchError, match="cut short"):
        udiff.parse("--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n a\n")
