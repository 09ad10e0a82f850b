"""PURE: a three-way merge of lines, to keep hand edits apart from vpatch's edits.

`apply --force` on a file edited since vpatch wrote it, and `apply --adopt` of a file with more
hand edits than the spec's, must know the file's bytes with vpatch's edits taken out but every
hand edit kept: that is the base every later rollback restores or replays the remaining specs
on. Given what vpatch wrote (the ancestor), the file now (hand edits on top) and the base
(vpatch's edits out), the merge takes both sides' changes where they touch different lines and
refuses where they touch the same ones differently: a hand edit inside vpatch's own lines has
no honest base, and the caller says so instead of guessing.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patcher.plan.hostfacts import FileFact


@dataclass(frozen=True)
class _Hunk:
    lo: int  # ancestor lines [lo, hi) are replaced by `lines`
    hi: int
    lines: tuple[str, ...]


def _hunks(ancestor: list[str], other: list[str]) -> list[_Hunk]:
    ops = difflib.SequenceMatcher(None, ancestor, other, autojunk=False).get_opcodes()
    return [_Hunk(i1, i2, tuple(other[j1:j2])) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


def _region(ancestor: list[str], lo: int, hi: int, hunks: list[_Hunk]) -> list[str]:
    """Ancestor lines [lo, hi) with `hunks` (inside that range, in order) applied."""
    out: list[str] = []
    at = lo
    for h in hunks:
        out += ancestor[at : h.lo] + list(h.lines)
        at = h.hi
    return out + ancestor[at:hi]


def merge(ancestor: str, ours: str, theirs: str) -> tuple[str | None, list[str]]:
    """(merged text, []) or (None, the ancestor line ranges both sides changed differently).

    Hunks that overlap or touch (an insertion at the edge of the other side's change counts)
    form one region; a region changed by one side takes that side, one changed alike by both
    takes it once, and any other is a conflict."""
    a = ancestor.splitlines(keepends=True)
    tagged = sorted(
        [(h, 0) for h in _hunks(a, ours.splitlines(keepends=True))]
        + [(h, 1) for h in _hunks(a, theirs.splitlines(keepends=True))],
        key=lambda x: (x[0].lo, x[0].hi),
    )
    out: list[str] = []
    conflicts: list[str] = []
    at = 0
    i = 0
    while i < len(tagged):
        lo, hi = tagged[i][0].lo, tagged[i][0].hi
        group = [tagged[i]]
        i += 1
        while i < len(tagged) and tagged[i][0].lo <= hi:
            group.append(tagged[i])
            hi = max(hi, tagged[i][0].hi)
            i += 1
        sides = [_region(a, lo, hi, [h for h, s in group if s == side]) for side in (0, 1)]
        has = {s for _h, s in group}
        out += a[at:lo]
        if len(has) == 1:
            out += sides[has.pop()]
        elif sides[0] == sides[1]:
            out += sides[0]
        else:
            conflicts.append(f"line {lo + 1}" if hi - lo <= 1 else f"lines {lo + 1}-{hi}")
        at = hi
    if conflicts:
        return None, conflicts
    return "".join(out + a[at:]), []


def changed_lines(before: str, after: str, limit: int = 6) -> str:
    """The lines `after` adds or removes against `before`, for a message: `-old`/`+new`,
    at most `limit` of them, then how many more."""
    got = [
        ln
        for ln in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]
    shown = [ln if len(ln) <= 80 else ln[:77] + "..." for ln in got[:limit]]
    more = f" (+{len(got) - limit} more)" if len(got) > limit else ""
    return ", ".join(repr(ln) for ln in shown) + more


def hand_lines(fact: FileFact) -> str:
    """`: lines ...` naming how a hand-edited file differs from pip's bytes, when those are
    at hand (`record_text`); "" otherwise."""
    if fact.record_text is None or fact.text is None:
        return ""
    return "; differs from pip's bytes in " + changed_lines(fact.record_text, fact.text)
