"""PURE: `difflib.unified_diff`'s output in near-linear time for large files.

difflib's SequenceMatcher looks for the longest matching block of the whole remaining range at
every step: on a 20k-line module with 2,000 changed lines that is 10-11 s of one core, against
a few milliseconds for `diff -u`. Here the files are first split at anchors, the way patience
diff does: the common head and tail, then the lines that occur exactly once in each side, in
the longest run that keeps their order (longest increasing subsequence, O(n log n)). Only the
short stretches between two anchors go through SequenceMatcher; its matching blocks, shifted
back into place, are the whole file's, and difflib itself groups them into hunks
(`SequenceMatcher.get_grouped_opcodes`), so headers, ranges and context are difflib's own.

Where every line of the two sides is unique and one side is the other with lines removed and
added (no line moved), both ways find the same matching and the output is byte for byte
difflib's (tests/unit/test_fastdiff.py checks this on generated cases); where lines repeat or
move, both outputs are valid unified diffs of the same texts, possibly hunked differently.
Small inputs are matched by SequenceMatcher alone: it is fast there and its choice stays the
reference. A file whose last line has no newline gets GNU `diff -u`'s marker after that line
(`\\ No newline at end of file`), which difflib leaves out: without it the next line of the
diff joins that one, and neither `patch` nor `patcher.authoring.udiff` can read the hunk. A
large stretch with no unique line at all (generated code: the same few lines over and over)
is matched by `matcher` where the caller passes one (the system's `diff`,
`patcher.authoring.sysdiff`:
an executor's choice; this module stays pure), else by difflib.
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Callable, Iterator, Sequence

# Below this many line pairs (len(a) * len(b)) difflib is fast enough and is used as it is.
SMALL = 2_000_000
# A stretch without anchors this large goes to the system's diff (`patcher.authoring.sysdiff`) if
# any.
HUGE = 8_000_000

Block = tuple[int, int, int]  # (i, j, n): a[i:i+n] == b[j:j+n]
Matcher = Callable[[Sequence[str], Sequence[str]], "list[Block] | None"]


def unified_diff(
    a: Sequence[str],
    b: Sequence[str],
    fromfile: str = "",
    tofile: str = "",
    n: int = 3,
    lineterm: str = "\n",
    small: int = SMALL,
    matcher: Matcher | None = None,
) -> Iterator[str]:
    """The lines of `difflib.unified_diff(a, b, fromfile, tofile, n=n, lineterm=lineterm)`
    (no dates), with GNU diff's marker after a last line without newline (`a` and `b` as
    `split_lines` makes them, so that only a last line can lack one); large inputs are
    matched at unique-line anchors first (module docstring), a large stretch without any by
    `matcher` when given."""
    sm = difflib.SequenceMatcher(None, a, b)  # the grouping is difflib's, on our blocks
    if len(a) * len(b) > small:
        blocks = [difflib.Match(*blk) for blk in matching_blocks(a, b, small, matcher)]
        sm.matching_blocks = blocks  # type: ignore[attr-defined]  # its cache, read first
    started = False
    for group in sm.get_grouped_opcodes(n):
        if not started:
            started = True
            yield f"--- {fromfile}{lineterm}"
            yield f"+++ {tofile}{lineterm}"
        first, last = group[0], group[-1]
        old = _range(first[1], last[2])
        new = _range(first[3], last[4])
        yield f"@@ -{old} +{new} @@{lineterm}"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from _run(" ", a, i1, i2)
                continue
            if tag in ("replace", "delete"):
                yield from _run("-", a, i1, i2)
            if tag in ("replace", "insert"):
                yield from _run("+", b, j1, j2)


NO_NEWLINE = "\\ No newline at end of file\n"
_MARKED = "\n" + NO_NEWLINE  # after a line without newline: ends it, then the marker


def split_lines(text: str) -> list[str]:
    """`text`'s lines as `diff` and `patch` see them: broken after each newline only, which
    each keeps (the last line may have none). Not `str.splitlines`, which also breaks at a
    carriage return, a form feed and other separators that are ordinary characters to diff
    and patch: a diff written from such lines is counted otherwise than `patch` reads it."""
    lines = text.split("\n")
    last = lines.pop()
    out = [line + "\n" for line in lines]
    if last:
        out.append(last)
    return out


def _run(prefix: str, side: Sequence[str], lo: int, hi: int) -> Iterator[str]:
    """side[lo:hi] as hunk lines; the file's last line, where it has no newline, followed by
    the marker GNU `diff -u` writes there (without it, the next line would join this one and
    `patch` would reject the diff)."""
    for line in side[lo:hi]:
        yield prefix + line
    if hi == len(side) and hi > lo and not side[-1].endswith("\n"):
        yield _MARKED


def _range(start: int, stop: int) -> str:
    """A hunk's `start,length` as unified diffs write it (a one-line range is its number; an
    empty one names the line before it)."""
    first, length = start + 1, stop - start
    if length == 1:
        return str(first)
    if not length:
        first -= 1
    return f"{first},{length}"


def matching_blocks(
    a: Sequence[str], b: Sequence[str], small: int = SMALL, matcher: Matcher | None = None
) -> list[Block]:
    """Maximal matching blocks in order, ending with the (len(a), len(b), 0) sentinel, as
    `SequenceMatcher.get_matching_blocks` returns them. A stretch of at most `small` line
    pairs goes to SequenceMatcher whole; a larger one is split at anchors first, and one with
    no anchor and over HUGE pairs goes to `matcher` (the system's diff) when it answers."""
    raw: list[Block] = []
    _match(a, b, (0, len(a), 0, len(b)), (small, matcher), raw)
    merged: list[Block] = []
    for i, j, k in raw:
        if k == 0:
            continue
        if merged and merged[-1][0] + merged[-1][2] == i and merged[-1][1] + merged[-1][2] == j:
            pi, pj, pk = merged.pop()
            merged.append((pi, pj, pk + k))
        else:
            merged.append((i, j, k))
    merged.append((len(a), len(b), 0))
    return merged


def _match(
    a: Sequence[str],
    b: Sequence[str],
    box: tuple[int, int, int, int],
    how: tuple[int, Matcher | None],
    out: list[Block],
) -> None:
    """Append the matching blocks of a[alo:ahi] and b[blo:bhi] (`box`) to `out`, in order."""
    alo, ahi, blo, bhi = box
    small, matcher = how
    head = 0
    while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
        head += 1
    if head:
        out.append((alo, blo, head))
        alo, blo = alo + head, blo + head
    tail = 0
    while ahi - tail > alo and bhi - tail > blo and a[ahi - tail - 1] == b[bhi - tail - 1]:
        tail += 1
    ahi_in, bhi_in = ahi - tail, bhi - tail
    big = (ahi_in - alo) * (bhi_in - blo) > small // 4
    anchors = _anchors(a, b, alo, ahi_in, blo, bhi_in) if big else []
    if anchors:
        i0, j0 = alo, blo
        for i, j in anchors:
            _match(a, b, (i0, i, j0, j), how, out)
            out.append((i, j, 1))
            i0, j0 = i + 1, j + 1
        _match(a, b, (i0, ahi_in, j0, bhi_in), how, out)
    elif alo < ahi_in and blo < bhi_in:
        found = None
        if matcher is not None and (ahi_in - alo) * (bhi_in - blo) > HUGE:
            found = matcher(a[alo:ahi_in], b[blo:bhi_in])
        if found is None:
            sm = difflib.SequenceMatcher(None, a[alo:ahi_in], b[blo:bhi_in])
            found = [(i, j, k) for i, j, k in sm.get_matching_blocks() if k]
        out.extend((alo + i, blo + j, k) for i, j, k in found)
    if tail:
        out.append((ahi_in, bhi_in, tail))


def _anchors(
    a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int
) -> list[tuple[int, int]]:
    """The lines unique to both ranges, in the longest order-keeping run (patience's anchors);
    [] when there are none (difflib then takes the whole range)."""
    seen_a: dict[str, int] = {}
    for i in range(alo, ahi):
        seen_a[a[i]] = -1 if a[i] in seen_a else i
    seen_b: dict[str, int] = {}
    for j in range(blo, bhi):
        line = b[j]
        if seen_a.get(line, -1) >= 0:
            seen_b[line] = -1 if line in seen_b else j
    pairs = [(seen_a[line], j) for line, j in seen_b.items() if j >= 0]
    pairs.sort(key=lambda p: p[1])
    return _longest_increasing(pairs)


def _longest_increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest run of `pairs` (sorted by j) whose i increases too (patience sorting)."""
    tops: list[int] = []  # the smallest i ending a run of each length
    ends: list[int] = []  # index into pairs of that run's last pair
    back: list[int] = [-1] * len(pairs)
    for k, (i, _j) in enumerate(pairs):
        at = bisect.bisect_left(tops, i)
        back[k] = ends[at - 1] if at else -1
        if at == len(tops):
            tops.append(i)
            ends.append(k)
        else:
            tops[at] = i
            ends[at] = k
    out: list[tuple[int, int]] = []
    k = ends[-1] if ends else -1
    while k >= 0:
        out.append(pairs[k])
        k = back[k]
    return out[::-1]


def from_changes(
    a: Sequence[str],
    b: Sequence[str],
    changes: Sequence[int],
    fromfile: str = "",
    tofile: str = "",
    n: int = 3,
) -> str | None:
    """`unified_diff`'s text of a -> b from a matching given as its changes, written without
    a search: `changes` holds four numbers per change, i1 i2 j1 j2 (a[i1:i2] becomes b[j1:j2]),
    in order, as the system's `diff` lists them (`patcher.authoring.sysdiff.CHANGES`). The
    grouping is difflib's (`get_grouped_opcodes`): `n` lines of context, fewer only at an end
    of the file, hunks split where more than 2n unchanged lines separate two changes.

    The changes are checked, not trusted: every stretch between two of them, and before the
    first and after the last, must be the same lines on both sides (compared whole), every
    change must change something, two changes must have an unchanged line between them, and
    the numbers must stay inside the texts. None where one does not hold; the text written is
    then a diff of a -> b by construction (its - and + lines are a's and b's own).

    Why not format line by line: a 20k-line module's 13k-line diff is a few thousand runs; each
    run is one join of a slice (`p + p.join(lines)` is the run with prefix p on every line),
    so the per-line work is C's."""
    if len(changes) % 4:
        return None
    la, lb = len(a), len(b)
    # where a side's last line has no newline, the marker follows it wherever it is written
    # (as a change or as context): it rides on the line itself
    a, b = _marked(a), _marked(b)
    out = [f"--- {fromfile}\n+++ {tofile}\n"]
    put = out.append
    pa = pb = 0  # where the last change ended
    at = first_a = first_b = -1  # the open hunk: its @@ line's index in out, where it starts
    nn = 2 * n
    for i1, i2, j1, j2 in zip(
        changes[::4], changes[1::4], changes[2::4], changes[3::4], strict=True
    ):
        same = a[pa:i1]
        if i1 - pa != j1 - pb or same != b[pb:j1] or i1 < pa:
            return None  # the lines between two changes differ, or the changes overlap
        if i1 > i2 or j1 > j2 or (i1 == i2 and j1 == j2) or i2 > la or j2 > lb:
            return None
        if at >= 0 and 0 < i1 - pa <= nn:  # close enough: one hunk, these are its context
            put(" " + " ".join(same))
        else:
            if at >= 0:  # a change and the one before it have nothing between, or 2n+ lines
                if i1 == pa:
                    return None
                _close(out, at, (first_a, first_b, pa, pb), a[pa : pa + n])
            lead = same[-n:] if n else []
            first_a, first_b = i1 - len(lead), j1 - len(lead)
            at = len(out)
            put("")  # the hunk's @@ line, once its end is known
            if lead:
                put(" " + " ".join(lead))
        if i1 < i2:
            put("-" + "-".join(a[i1:i2]))
        if j1 < j2:
            put("+" + "+".join(b[j1:j2]))
        pa, pb = i2, j2
    if la - pa != lb - pb or a[pa:] != b[pb:]:
        return None
    if at < 0:
        return ""
    _close(out, at, (first_a, first_b, pa, pb), a[pa : pa + n])
    return "".join(out)


def _marked(side: Sequence[str]) -> Sequence[str]:
    """`side` with the marker GNU `diff -u` writes after a last line without newline joined
    to that line (one element still: the hunks' line counts stay the file's)."""
    if not side or side[-1].endswith("\n"):
        return side
    return [*side[:-1], side[-1] + _MARKED]


def _close(out: list[str], at: int, box: tuple[int, int, int, int], tail: Sequence[str]) -> None:
    """End the hunk whose @@ line is out[at]: `tail` (its context after the last change), then
    the @@ line for a[first_a:end_a + len(tail)] and b[first_b:end_b + len(tail)]."""
    first_a, first_b, end_a, end_b = box
    if tail:
        out.append(" " + " ".join(tail))
    out[at] = f"@@ -{_range(first_a, end_a + len(tail))} +{_range(first_b, end_b + len(tail))} @@\n"
