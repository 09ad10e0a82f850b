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
Small inputs go to difflib directly: it is fast there and its choice stays the reference. A
large stretch with no unique line at all (generated code: the same few lines over and over)
is matched by `matcher` where the caller passes one (the system's `diff`,
`patcher.authoring.sysdiff`:
an executor's choice; this module stays pure), else by difflib.
"""

from __future__ import annotations

import bisect
import difflib
import re
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
    (no dates); large inputs are matched at unique-line anchors first (module docstring), a
    large stretch without any by `matcher` when given."""
    if len(a) * len(b) <= small:
        yield from difflib.unified_diff(a, b, fromfile, tofile, n=n, lineterm=lineterm)
        return
    sm = difflib.SequenceMatcher(None, a, b)  # the grouping is difflib's, on our blocks
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
                for line in a[i1:i2]:
                    yield " " + line
                continue
            if tag in ("replace", "delete"):
                for line in a[i1:i2]:
                    yield "-" + line
            if tag in ("replace", "insert"):
                for line in b[j1:j2]:
                    yield "+" + line


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


def is_canonical(
    a: Sequence[str],
    b: Sequence[str],
    lines: Sequence[str],
    fromfile: str,
    tofile: str,
    n: int = 3,
) -> bool:
    """Whether `lines` (another program's unified diff, e.g. the system's `diff -u`) are a diff
    of a -> b written exactly as `unified_diff` writes one from the same matching: difflib's
    headers and `@@` ranges, every unchanged stretch equal on both sides, each change's `-`
    lines before its `+` lines, `n` lines of context (fewer only at an end of the file), hunks
    split where more than 2n unchanged lines separate two changes. Linear in the lines; one
    that does not hold is False (the caller then formats its own)."""
    if len(lines) < 3 or lines[0] != f"--- {fromfile}\n" or lines[1] != f"+++ {tofile}\n":
        return not lines and list(a) == list(b)
    k, end = 2, len(lines)
    a_done = b_done = 0  # what the hunks so far covered
    first = True
    while k < end:
        head = _HUNK.fullmatch(lines[k])
        if head is None:
            return False
        k += 1
        a0, a_len = _start(head.group(1), head.group(2))
        b0, b_len = _start(head.group(3), head.group(4))
        skipped = a0 - a_done
        if skipped < 0 or skipped != b0 - b_done or a[a_done:a0] != b[b_done:b0]:
            return False
        if not first and skipped < 1:  # two hunks that should have been one
            return False
        i, j, a_end, b_end = a0, b0, a0 + a_len, b0 + b_len
        run = 0  # unchanged lines in a row
        lead = -1  # context before the hunk's first change
        minus_ok = True  # a '-' may come (no '+' of this change yet)
        while i < a_end or j < b_end:
            if k >= end:
                return False
            text = lines[k]
            tag, body = text[:1], text[1:]
            if tag == " ":
                if i >= a_end or j >= b_end or a[i] != body or b[j] != body:
                    return False
                i, j, run, minus_ok = i + 1, j + 1, run + 1, True
            else:
                if lead < 0:
                    lead = run
                elif run > 2 * n:
                    return False
                run = 0
                if tag == "-" and minus_ok and i < a_end and a[i] == body:
                    i += 1
                elif tag == "+" and j < b_end and b[j] == body:
                    j, minus_ok = j + 1, False
                else:
                    return False
            k += 1
        # n lines of context each side; fewer only where the file begins or ends
        if lead < 0 or lead > n or (lead < n and (not first or a0 != 0 or b0 != 0)):
            return False
        if run > n or (run < n and (i != len(a) or j != len(b))):
            return False
        a_done, b_done, first = i, j, False
    return a[a_done:] == b[b_done:]


_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@\n")


def _start(first: str, length: str | None) -> tuple[int, int]:
    """(0-based start, length) of a hunk's range as `_range` writes it."""
    size = 1 if length is None else int(length)
    return (int(first) if size == 0 else int(first) - 1), size
