"""A big file's diff from the system's `diff` (patcher.authoring.sysdiff.unified): diff lists its
changes, `fastdiff.from_changes` writes the text and checks every line between them. The text
is byte for byte what `diff -u` writes (and difflib, where difflib is the reference); numbers
that are not the texts' changes are refused, and a diff that cannot be started, fails or hangs
leaves vpatch's own formatting."""

from __future__ import annotations

import difflib
import random
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patcher.authoring import handedit, sysdiff
from patcher.plan import fastdiff
from tests.support import fakediff

pytestmark = pytest.mark.skipif(sysdiff.available() is None, reason="no system diff here")


def _reference(a: list[str], b: list[str]) -> str:
    return "".join(difflib.unified_diff(a, b, "a/m.py", "b/m.py"))


def _unified(a: list[str], b: list[str]) -> str | None:
    return sysdiff.unified("".join(a), "".join(b), "a/m.py", "b/m.py")


def _diff_u(a: list[str], b: list[str]) -> str:
    """`diff -u`'s own text of the two (what vpatch printed before: the text itself)."""
    out = sysdiff._run(
        ["-u", "--label", "a/m.py", "--label", "b/m.py"], "".join(a).encode(), "".join(b).encode()
    )
    assert out is not None
    return out.decode()


def _edited(size: int, edits: list[tuple[int, int, int]]) -> tuple[list[str], list[str]]:
    a = [f"line {i} = value({i})\n" for i in range(size)]
    b = list(a)
    for k, (pos, removed, added) in enumerate(edits):
        at = pos % (len(b) + 1)
        b[at : at + removed] = [f"new {k}.{m}\n" for m in range(added)]
    return a, b


def _count_starts(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The options of every diff started from now on (sysdiff._running, still run)."""
    started: list[list[str]] = []
    real = sysdiff._running

    def counting(options: list[str], a: bytes, b: bytes) -> object:
        started.append(options)
        return real(options, a, b)

    monkeypatch.setattr(sysdiff, "_running", counting)
    return started


@settings(max_examples=120, deadline=None)
@given(
    size=st.integers(0, 300),
    edits=st.lists(
        st.tuples(st.integers(0, 400), st.integers(0, 8), st.integers(0, 8)), max_size=20
    ),
)
def test_unique_lines_give_difflibs_text_byte_for_byte(
    size: int, edits: list[tuple[int, int, int]]
) -> None:
    a, b = _edited(size, edits)
    assert _unified(a, b) == _reference(a, b) == (_diff_u(a, b) if a != b else "")


@settings(max_examples=300, deadline=None)
@given(
    a=st.lists(st.sampled_from(["x\n", "y\n", "\n", "z\n"]), max_size=40),
    edits=st.lists(
        st.tuples(
            st.integers(0, 50),
            st.integers(0, 3),
            st.lists(st.sampled_from(["x\n", "y\n", "\n", "n\n"]), max_size=3),
        ),
        max_size=6,
    ),
)
def test_repeated_lines_give_diff_us_own_text(
    a: list[str], edits: list[tuple[int, int, list[str]]]
) -> None:
    """Where a change could sit in more than one place, diff's choice is -u's (its horizon):
    the text is `diff -u`'s byte for byte, as it was when vpatch printed diff -u's text."""
    b = list(a)
    for pos, removed, added in edits:
        at = pos % (len(b) + 1)
        b[at : at + removed] = added
    assert _unified(a, b) == (_diff_u(a, b) if a != b else "")


def test_the_20k_line_module_is_diff_us_text_and_vpatchs() -> None:
    rng = random.Random(40)
    a = [f"    v{i} = compute(x, {i})\n" for i in range(20_000)]
    b = list(a)
    for i in rng.sample(range(20_000), 2_000):
        b[i] = a[i].rstrip("\n") + "  # changed\n"
    own = "".join(fastdiff.unified_diff(a, b, "a/m.py", "b/m.py"))
    assert _unified(a, b) == own == _diff_u(a, b)


def test_texts_diff_splits_otherwise_are_not_sent_to_it() -> None:
    a = [f"l{i}\n" for i in range(10)]
    for b in (
        [*a[:-1], "l9"],  # no newline at the end
        [*a[:3], "form\x0cfeed\n", *a[4:]],  # splitlines breaks there, diff does not
        [*a[:3], "lone\rcr\n", *a[4:]],
    ):
        assert sysdiff.unified("".join(a), "".join(b), "a/m", "b/m") is None


def test_labels_are_written_as_vpatch_writes_them() -> None:
    """The headers are vpatch's own (diff is given no label): a name diff would quote is
    written as difflib writes it."""
    a, b = ["x\n", "y\n"], ["x\n", "z\n"]
    want = "".join(difflib.unified_diff(a, b, "a/m\tx", 'b/"m"'))
    assert sysdiff.unified("x\ny\n", "x\nz\n", "a/m\tx", 'b/"m"') == want


def test_diffs_change_list_is_read_strictly() -> None:
    assert sysdiff._numbers(b"3,4,3,4,10,10,10,12,") == [3, 4, 3, 4, 10, 10, 10, 12]
    assert sysdiff._numbers(b"") == []
    for bad in (b"3,4,3,4", b"3,,4,", b"03,4,", b"-1,", b"1.5,", b"3 4 3 4\n", None):
        assert sysdiff._numbers(bad) is None


def _file(before: str, after: str) -> handedit.FileDiff:
    return handedit.FileDiff("m.py", "/x/m.py", "modified", None, None, "wheel", before, after)


def _big() -> tuple[list[str], list[str]]:
    a = [f"v{i} = {i}\n" for i in range(3_000)]
    return a, [f"w{i}\n" if i % 10 == 3 else line for i, line in enumerate(a)]


def test_vpatch_diff_of_a_big_file_is_the_system_diffs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fact behind the speed (no timing asserted): a big file's diff is written from
    diff's changes, no Python matching; a small file's, and a big one diff cannot take, are
    vpatch's own."""
    a, b = _big()
    want = "".join(fastdiff.unified_diff(a, b, "a/m.py", "b/m.py"))
    small_a, small_b = a[:50], b[:50]
    small_want = "".join(fastdiff.unified_diff(small_a, small_b, "a/m.py", "b/m.py"))

    def no_python(*args: object, **kwargs: object) -> object:
        raise AssertionError("matched in Python")

    monkeypatch.setattr(fastdiff, "unified_diff", no_python)
    assert _file("".join(a), "".join(b)).diff == want
    monkeypatch.undo()
    started = _count_starts(monkeypatch)
    assert _file("".join(small_a), "".join(small_b)).diff == small_want
    assert started == []  # a small file: no diff started
    no_eol = "".join(b).rstrip("\n")
    assert _file("".join(a), no_eol).diff == "".join(
        fastdiff.unified_diff(a, no_eol.splitlines(True), "a/m.py", "b/m.py")
    )
    assert started == []  # no newline at the end: not diff's to split
    assert _file("".join(a), "".join(b)).diff == want
    assert started == [sysdiff.CHANGES]


def test_diff_runs_on_memory_files_and_leaves_nothing_open() -> None:
    """Inputs and output in memory files; after it, no descriptor of them is left open."""
    a, b = _big()
    before = fakediff.open_fds()
    assert sysdiff._memory_files()
    assert _unified(a, b) == _reference(a, b)
    assert sysdiff._run([], b"x\n", b"x\n") == b""
    assert fakediff.open_fds() == before


def test_a_spawn_that_fails_falls_back_to_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """diff not started over memory files (none to be had, or the start fails): diff over
    files of a private directory, the same text; no diff at all: vpatch's own formatting, the
    same text."""
    import subprocess

    a, b = _big()
    want = _reference(a, b)
    real_popen = subprocess.Popen
    started: list[list[str]] = []

    def popen(argv: list[str], **kwargs: object) -> object:
        started.append(argv)
        if "pass_fds" in kwargs:  # the start over memory files
            raise OSError(24, "Too many open files")
        return real_popen(argv, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "Popen", popen)
    assert _unified(a, b) == want
    assert [argv[-1] for argv in started] == [started[0][-1], "b"]
    assert started[0][-1].startswith("/dev/fd/")
    started.clear()

    def no_memory_file(name: str, flags: int = 0) -> int:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(sysdiff.os, "memfd_create", no_memory_file)
    assert _unified(a, b) == want
    assert [argv[-1] for argv in started] == ["b"]
    monkeypatch.undo()
    monkeypatch.setattr(sysdiff, "_memory_files", lambda: False)
    assert _unified(a, b) == want
    monkeypatch.setattr(sysdiff, "available", lambda: None)
    assert _unified(a, b) is None
    assert _file("".join(a), "".join(b)).diff == want  # vpatch's own


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("exit 2", "trouble"),
        ("exit 1", "says different, lists no change"),
        ("printf '0,0,0,1,'; exit 1", "a change that is not the texts'"),
        ("printf '3,4,3,4,'; exit 1", "changes that leave differing lines unlisted"),
        ("printf '3,4,3,4,2993,2994,2993,2994,'; exit 1", "differing lines between two"),
        ("printf 'Binary files differ\\n'; exit 1", "not a change list"),
        ("printf '3,4,3,4,3,4,3,4,'; exit 1", "a change listed twice"),
    ],
)
def test_what_diff_answers_is_checked_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, why: str
) -> None:
    """A diff that fails or whose numbers are not the texts' changes: no text from it (the
    proof refuses), and `vpatch diff` prints its own, which is the true diff."""
    a, b = _big()
    monkeypatch.setattr(sysdiff, "available", lambda: fakediff.program(tmp_path, body))
    assert _unified(a, b) is None, why
    assert _file("".join(a), "".join(b)).diff == _reference(a, b)


def test_a_diff_that_hangs_is_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _big()
    monkeypatch.setattr(sysdiff, "available", lambda: fakediff.program(tmp_path, "exec sleep 30"))
    monkeypatch.setattr(sysdiff, "TIMEOUT", 0.3)
    before = fakediff.open_fds()
    started = time.monotonic()
    assert _unified(a, b) is None
    assert time.monotonic() - started < 20  # not the child's 30 s: it was killed
    assert fakediff.open_fds() == before


def test_a_diff_started_early_is_the_one_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """`FileDiff.start` (a host's texts just here): diff starts then, `diff` takes that run and
    starts none; texts changed since are diffed anew; nothing is left open either way."""
    a, b = _big()
    want = _reference(a, b)
    before = fakediff.open_fds()
    f = _file("".join(a), "".join(b))
    f.start()
    assert f.early is not None
    started = _count_starts(monkeypatch)
    assert f.diff == want
    assert started == [] and f.early is None
    g = _file("".join(a), "".join(a))
    g.start()
    g.after = "".join(b)  # the texts changed after the start: not that run's
    assert g.diff == want
    assert started == [sysdiff.CHANGES, sysdiff.CHANGES]  # g's start, then its diff's own
    assert fakediff.open_fds() == before


def test_a_diff_started_and_never_asked_is_let_go() -> None:
    import gc

    a, b = _big()
    before = fakediff.open_fds()
    job = sysdiff.Unified("".join(a), "".join(b), "a/m.py", "b/m.py")
    assert fakediff.open_fds() != before  # its memory files
    del job
    gc.collect()
    assert fakediff.open_fds() == before
