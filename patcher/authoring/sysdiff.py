"""The system's `diff` as a matcher of lines, for the stretches `patcher.plan.fastdiff` cannot
split.

A large stretch with no line unique to both sides (a generated module: the same few lines over
and over) is quadratic for difflib. GNU diff matches such input in milliseconds. Here it only
matches: each distinct line becomes a number, the two number lists go to `diff` in files of a
private directory, and its normal-format change commands (`5,7c5,6`, `3a4`, `8d7`) become the
matching blocks; the output format stays difflib's (`fastdiff` groups the blocks).

A large file's whole diff can come from it too (`unified`): `diff -u` writes a 20k-line
module's 13k-line diff in a few milliseconds where Python's formatting alone takes tens. Its
text is used only where it is exactly what `patcher.plan.fastdiff` would write from the same
matching (`fastdiff.is_canonical` checks every line against both texts, the headers, ranges,
context and hunk splits); both texts must end in a newline and be split by splitlines where
diff splits them, at each "\n" and nowhere else (splitlines knows other breaks: "\r", "\x0c",
...), or the caller formats its own.

Started safely: a fixed path (/usr/bin/diff, /bin/diff), no shell, a private working
directory, `LC_ALL=C` and nothing else from the environment. No diff there, or a diff that
fails: None, and the caller uses difflib.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

_DIFFS = ("/usr/bin/diff", "/bin/diff")
_CHANGE = re.compile(rb"^(\d+)(?:,(\d+))?([acd])(\d+)(?:,(\d+))?$")
TIMEOUT = 120.0

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
    a_text: str, b_text: str, a: Sequence[str], b: Sequence[str], fromfile: str, tofile: str
) -> str | None:
    """`diff -u`'s diff of a_text -> b_text (`a`, `b`: their splitlines(keepends=True)) when it
    is byte for byte what `fastdiff.unified_diff` writes (`fastdiff.is_canonical`); None when
    it cannot be had or is not (the caller formats its own)."""
    from patcher.plan import fastdiff

    for t, split in ((a_text, a), (b_text, b)):
        if (t and not t.endswith("\n")) or t.count("\n") != len(split):
            return None  # "\\ No newline at end of file", or a break diff does not split at
    if any(c in label for label in (fromfile, tofile) for c in '\n\r\t\\"'):
        return None  # a label diff might quote
    try:
        a_bytes, b_bytes = a_text.encode("utf-8"), b_text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    out = _run(["-u", "--label", fromfile, "--label", tofile], a_bytes, b_bytes)
    if out is None:
        return None
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.splitlines(keepends=True)
    return text if fastdiff.is_canonical(a, b, lines, fromfile, tofile) else None


def _run(options: list[str], a: bytes, b: bytes) -> bytes | None:
    """`diff OPTIONS a b` over two private files holding `a` and `b`: its output when it
    says same (0) or different (1), else None (no diff, an error, a timeout)."""
    program = available()
    if program is None:
        return None
    import shutil  # here, not at import: the planner imports this module on every run
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
