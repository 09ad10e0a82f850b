"""The system's `diff` as a matcher of lines: for the stretches `patcher.plan.fastdiff` cannot
split, and for a large file's whole diff.

A large stretch with no line unique to both sides (a generated module: the same few lines over
and over) is quadratic for difflib. GNU diff matches such input in milliseconds. Here it only
matches: each distinct line becomes a number, the two number lists go to `diff`, and its
normal-format change commands (`5,7c5,6`, `3a4`, `8d7`) become the matching blocks; the output
format stays difflib's (`fastdiff` groups the blocks).

A large file's whole diff comes from it too (`unified`): `diff` matches a 20k-line module in a
few milliseconds and lists only its changes, four numbers each (`CHANGES`), and
`fastdiff.from_changes` writes the text from them, checking every line between two changes on
both sides: the text `diff -u` writes, without parsing or proving diff's own. Both texts must
end in a newline and be split by splitlines where diff splits them, at each "\n" and nowhere
else (splitlines knows other breaks: "\r", "\x0c", ...), or the caller formats its own.

Started safely: a fixed path (/usr/bin/diff, /bin/diff), no shell, `LC_ALL=C` and nothing else
from the environment, a timeout. Its inputs and its output are memory files (memfd_create,
named to it as /dev/fd/N; no directory, nothing on disk), and it runs while the caller goes on
(`_running`); where there are none, files of a private directory. No diff there, or a diff
that fails: None, and the caller uses difflib.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import lru_cache, partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

_DIFFS = ("/usr/bin/diff", "/bin/diff")
_CHANGE = re.compile(rb"^(\d+)(?:,(\d+))?([acd])(\d+)(?:,(\d+))?$")
TIMEOUT = 120.0
# `diff`'s changes, four numbers each: a[e:l] became b[E:L] (0-based; %de is the line before
# the old side's first, %dl its last; upper case: the new side's). Unchanged lines: nothing.
# Written as a JSON list's items: json reads them in half the time int() takes one by one
# (7,000 numbers for the 20k-line bench module: 0.4 ms against 0.8 here).
# --horizon-lines=3: `diff -u` keeps 3 lines (its context) of the common head and tail in its
# matching, and where a change could sit in more than one place (lines that repeat) that moves
# it; so does this, so the matching, and the text written from it, are `diff -u`'s.
_CHANGE_FORMAT = "%de,%dl,%dE,%dL,"
CHANGES = [
    "--horizon-lines=3",
    "--unchanged-group-format=",
    *(f"--{kind}-group-format={_CHANGE_FORMAT}" for kind in ("old", "new", "changed")),
]

Block = tuple[int, int, int]


def available() -> str | None:
    """The diff program used, or None."""
    return next((p for p in _DIFFS if os.access(p, os.X_OK)), None)


def blocks_from_normal(out: bytes, len_a: int, len_b: int) -> list[Block] | None:
    """PURE: the matching blocks (i, j, n) that `diff`'s normal output leaves between its
    changes, in order (no sentinel); None for output that does not add up."""
    blocks: list[Block] = []
    a_pos = b_pos = 0
    for line in out.splitlines():
        m = _CHANGE.match(line)
        if m is None:
            if line[:1] in (b"<", b">") or line == b"---":
                continue
            return None
        l1, l2, op, r1, r2 = m.groups()
        la, lb = int(l1), int(l2 or l1)
        ra, rb = int(r1), int(r2 or r1)
        a_start, a_end = (la, la) if op == b"a" else (la - 1, lb)
        b_start, b_end = (ra, ra) if op == b"d" else (ra - 1, rb)
        n = a_start - a_pos
        if n < 0 or n != b_start - b_pos:
            return None
        if n:
            blocks.append((a_pos, b_pos, n))
        a_pos, b_pos = a_end, b_end
    n = len_a - a_pos
    if n < 0 or n != len_b - b_pos:
        return None
    if n:
        blocks.append((a_pos, b_pos, n))
    return blocks


def matching_blocks(a: Sequence[str], b: Sequence[str]) -> list[Block] | None:
    """The matching blocks `diff` finds between a and b, or None (no diff, or it failed)."""
    ids: dict[str, int] = {}
    a_ids = [ids.setdefault(line, len(ids)) for line in a]
    b_ids = [ids.setdefault(line, len(ids)) for line in b]
    a_bytes = "".join(f"{n}\n" for n in a_ids).encode()
    b_bytes = "".join(f"{n}\n" for n in b_ids).encode()
    out = _run([], a_bytes, b_bytes)
    return None if out is None else blocks_from_normal(out, len(a), len(b))


def unified(
    a_text: str, b_text: str, fromfile: str, tofile: str, small: int | None = None
) -> str | None:
    """The unified diff of a_text -> b_text that `diff -u` writes, which is what
    `fastdiff.unified_diff` writes from the same matching: `diff` only lists its changes (four
    numbers each, `CHANGES`) and `fastdiff.from_changes` writes the text, checking every line
    between them. None where it cannot be had (no diff, it failed, a text diff does not split
    as splitlines does) or is not worth a child (at most `small` line pairs): the caller
    formats its own."""
    return Unified(a_text, b_text, fromfile, tofile, small).text()


class Unified:
    """`unified` in two steps. Made, it starts `diff` (where the texts are diff's to take: each
    text's lines counted, the one scan of its characters before diff starts); `text()` splits
    the texts while diff runs (a child: the other core), waits for it and writes the diff. Made
    as soon as a host's texts are here, diff runs while the rest of the scan finishes. One that
    is never asked lets its child and memory files go when it is collected (`_running`'s
    generator is closed then, its `finally` run)."""

    def __init__(
        self, a_text: str, b_text: str, fromfile: str, tofile: str, small: int | None = None
    ) -> None:
        self.texts = (a_text, b_text)
        self._names = (fromfile, tofile)
        self._lines = (a_text.count("\n"), b_text.count("\n"))
        self._stack = ExitStack()
        self._result: Callable[[], bytes | None] | None = None
        if (a_text and not a_text.endswith("\n")) or (b_text and not b_text.endswith("\n")):
            return  # "\\ No newline at end of file"
        if small is not None and self._lines[0] * self._lines[1] <= small:
            return
        try:
            a_bytes, b_bytes = a_text.encode("utf-8"), b_text.encode("utf-8")
        except UnicodeEncodeError:
            return
        self._result = self._stack.enter_context(_running(CHANGES, a_bytes, b_bytes))

    def text(self) -> str | None:
        """The diff's text, or None (asked once: diff's child is let go here)."""
        from patcher.plan import fastdiff

        result, self._result = self._result, None
        if result is None:
            return None
        with self._stack:
            (a_text, b_text), (a_lines, b_lines) = self.texts, self._lines
            a, b = a_text.splitlines(keepends=True), b_text.splitlines(keepends=True)
            if len(a) != a_lines or len(b) != b_lines:
                return None  # a break diff does not split at ("\r", "\x0c", ...)
            out = result()
        changes = _numbers(out)
        if changes is None:
            return None
        return fastdiff.from_changes(a, b, changes, *self._names)


def _numbers(out: bytes | None) -> list[int] | None:
    """PURE: the numbers of CHANGES' output ("3,4,3,4,10,11,10,11,"), or None for output that
    is not that (only digits and commas, each number followed by one comma)."""
    if out is None or out.translate(None, b"0123456789,") or out[-1:] not in (b",", b""):
        return None
    try:
        got = json.loads(f"[{out[:-1].decode('ascii')}]")
    except ValueError:  # ",," or a number with a leading 0: not diff's
        return None
    return got if isinstance(got, list) else None


def _run(options: list[str], a: bytes, b: bytes) -> bytes | None:
    """`diff OPTIONS a b`: its output when it says same (0) or different (1), else None (no
    diff, an error, a timeout)."""
    with _running(options, a, b) as result:
        return result()


@contextmanager
def _running(options: list[str], a: bytes, b: bytes) -> Iterator[Callable[[], bytes | None]]:
    """`diff OPTIONS a b` started; what it yields waits for it and gives `_run`'s answer. The
    inputs and the output are memory files (memfd_create, named to diff as /dev/fd/N): no
    directory, nothing on disk. Where there are none (not Linux, no /proc), two files of a
    private directory, diff run when asked. Leaving the block ends a diff still running."""
    program = available()
    if program is None:
        yield lambda: None
        return
    if not _memory_files():
        yield partial(_run_in_files, program, options, a, b)
        return
    import subprocess  # here, not at import: the planner imports this module on every run

    fds: list[int] = []
    try:
        for data in (a, b, b""):
            fds.append(os.memfd_create("vpatch-diff", os.MFD_CLOEXEC))
            _fill(fds[-1], data)
        fa, fb, out = fds
        # process-start: the system's diff (not a Python): a fixed path, no shell, "/" as its
        # working directory, LC_ALL=C and nothing else from the environment, no descriptor of
        # ours but its two inputs and its output
        proc = subprocess.Popen(
            [program, *options, f"/dev/fd/{fa}", f"/dev/fd/{fb}"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.DEVNULL,
            pass_fds=(fa, fb),
            cwd="/",
            env={"LC_ALL": "C"},
        )
    except OSError:
        for fd in fds:
            os.close(fd)
        yield partial(_run_in_files, program, options, a, b)
        return
    try:
        yield partial(_answer, proc, out)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        for fd in fds:
            os.close(fd)


def _fill(fd: int, data: bytes) -> None:
    """Write all of `data` (a memory file takes it in one write; a signal may cut one short)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _answer(proc: subprocess.Popen[bytes], out: int) -> bytes | None:
    """What `diff` wrote to `out`, once it has exited 0 or 1 within TIMEOUT; else None."""
    if not _exited(proc, TIMEOUT):
        proc.kill()
        proc.wait()
        return None
    if proc.returncode not in (0, 1):
        return None
    return os.pread(out, os.fstat(out).st_size, 0)


def _exited(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether the child exits within `timeout` seconds (reaped). A pidfd wakes this the moment
    it does; Popen.wait(timeout) polls in growing sleeps (milliseconds late at ours)."""
    import select
    import subprocess

    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux 5.3+: Popen's own wait
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(int(timeout * 1000)):
            return False
    finally:
        os.close(pidfd)
    proc.wait()
    return True


@lru_cache(maxsize=1)
def _memory_files() -> bool:
    """Whether diff can be given memory files: memfd_create, and /dev/fd to name them by."""
    return hasattr(os, "memfd_create") and os.path.isdir("/dev/fd/")


def _run_in_files(program: str, options: list[str], a: bytes, b: bytes) -> bytes | None:
    """`_run` over two files of a private directory (where there are no memory files)."""
    import shutil
    import subprocess
    import tempfile

    work = tempfile.mkdtemp(prefix="vpatch-diff-")
    try:
        for name, data in (("a", a), ("b", b)):
            fd = os.open(
                os.path.join(work, name),
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                0o600,
            )
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        try:
            # process-start: the system's diff (not a Python): a fixed path, no shell, a
            # private working directory, LC_ALL=C and nothing else from the environment
            res = subprocess.run(
                [program, *options, "a", "b"],
                cwd=work,
                env={"LC_ALL": "C"},
                capture_output=True,
                timeout=TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if res.returncode not in (0, 1):
            return None
        return res.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)
