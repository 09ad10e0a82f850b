"""An upstream fix as a unified diff between two real releases' wheels, cut to the hunks
that make it: what `vpatch backport` is fed in the tests, made at test time from the wheels
(cached under the suite's cache, tests/support/realpkgs.py), never committed."""

from __future__ import annotations

import difflib
import zipfile
from collections.abc import Callable, Sequence

from tests.support import realpkgs

Hunk = list[str]  # its "@@" line, then its lines


def wheel_text(package: str, version: str, rel: str) -> str:
    with zipfile.ZipFile(realpkgs.wheel(package, version)) as z:
        return z.read(rel).decode("utf-8")


def hunks(rel: str, old: str, new: str) -> tuple[list[str], list[Hunk]]:
    """The `---`/`+++` lines of old -> new and its hunks (three lines of context)."""
    lines = list(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}", f"b/{rel}"
    ))  # fmt: skip
    head, out, cur = lines[:2], [], []
    for line in lines[2:]:
        if line.startswith("@@") and cur:
            out.append(cur)
            cur = []
        cur.append(line)
    if cur:
        out.append(cur)
    return head, out


def changed(hunk: Hunk) -> list[str]:
    """The lines a hunk adds or removes."""
    return [ln for ln in hunk[1:] if ln[:1] in "+-"]


def cut(rel: str, old: str, new: str, keep: Callable[[Hunk], bool]) -> tuple[str, list[str]]:
    """The diff of `rel` with only the hunks `keep` takes, and the headers of those it left out."""
    head, found = hunks(rel, old, new)
    kept = [h for h in found if keep(h)]
    left = [h[0].strip() for h in found if not keep(h)]
    return ("".join(head + [ln for h in kept for ln in h]) if kept else ""), left


def mentions(markers: Sequence[str]) -> Callable[[Hunk], bool]:
    """A hunk whose added or removed lines name one of `markers`."""
    return lambda h: any(m in ln for ln in changed(h) for m in markers)
