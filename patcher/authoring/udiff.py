"""PURE: parse a unified diff (git's format or plain `diff -u`) and apply its hunks to texts.

For `vpatch backport`: an upstream fix, made against release V, is applied to V's pristine
files and then captured as a spec. Paths lose git's `a/` and `b/` prefixes. A hunk is placed
where its old lines (context and removals) stand in the file, nearest to the line its header
names; a hunk whose old lines are nowhere in the file is an error naming the hunk. Lines are
what `diff` and `patch` take them to be (broken after a newline only: a form feed or a
carriage return inside a line stays in it), and `\\ No newline at end of file` after a hunk
line takes that line's newline away.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from patcher.plan.fastdiff import split_lines

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    """The diff is malformed, or a hunk cannot be placed (the message names it)."""


@dataclass
class Hunk:
    header: str
    old_start: int
    lines: list[str] = field(default_factory=list)  # " x", "-x", "+x" (newline kept)

    @property
    def old(self) -> list[str]:
        return [ln[1:] for ln in self.lines if ln[:1] in (" ", "-")]

    @property
    def new(self) -> list[str]:
        return [ln[1:] for ln in self.lines if ln[:1] in (" ", "+")]


@dataclass
class FilePatch:
    old_path: str | None  # None: /dev/null (a new file)
    new_path: str | None  # None: the file is deleted
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def rel(self) -> str:
        return str(self.new_path or self.old_path)


def _path(raw: str) -> str | None:
    name = raw.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    return name


def parse(text: str) -> list[FilePatch]:
    """Every file of the diff with its hunks; anything between files (git's `diff --git`,
    `index` lines, prose) is skipped."""
    files: list[FilePatch] = []
    lines = split_lines(text)
    i = 0
    current: FilePatch | None = None
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            current = FilePatch(_path(line[4:]), _path(lines[i + 1][4:]))
            files.append(current)
            i += 2
            continue
        m = _HUNK.match(line)
        if m and current is not None:
            hunk = Hunk(line.rstrip("\n"), int(m.group(1)))
            old_left = int(m.group(2) or 1)
            new_left = int(m.group(4) or 1)
            i += 1
            while i < len(lines) and (old_left > 0 or new_left > 0):
                body = lines[i]
                if body.startswith("\\"):  # "\ No newline at end of file"
                    if hunk.lines:
                        hunk.lines[-1] = hunk.lines[-1].rstrip("\n")
                    i += 1
                    continue
                if body in ("\n", "\r\n", ""):
                    body = " " + (body or "\n")  # an empty context line, its space stripped
                kind = body[:1]
                if kind not in (" ", "-", "+"):
                    raise PatchError(f"{current.rel}: hunk {hunk.header}: stray line {body!r}")
                hunk.lines.append(body)
                old_left -= kind in (" ", "-")
                new_left -= kind in (" ", "+")
                i += 1
            # a trailing "\ No newline" belongs to this hunk
            if i < len(lines) and lines[i].startswith("\\") and hunk.lines:
                hunk.lines[-1] = hunk.lines[-1].rstrip("\n")
                i += 1
            if old_left > 0 or new_left > 0:
                raise PatchError(f"{current.rel}: hunk {hunk.header} is cut short")
            current.hunks.append(hunk)
            continue
        i += 1
    if not files:
        raise PatchError("no file in the diff (expected --- a/FILE / +++ b/FILE headers)")
    return files


def apply(text: str, patch: FilePatch) -> str:
    """`text` with every hunk of `patch` applied, in order; the first that cannot be placed is
    a PatchError naming it."""
    out, missed = place(text, patch)
    if missed:
        n, hunk = missed[0]
        raise PatchError(f"{patch.rel}: hunk {n} ({hunk.header}) does not apply: {NOT_THERE}")
    return out


NOT_THERE = "its old lines are not in the file"


def place(text: str, patch: FilePatch) -> tuple[str, list[tuple[int, Hunk]]]:
    """`text` with every hunk of `patch` that can be placed applied, in order, and the hunks
    (numbered from 1) that cannot: a run names them all, not the first alone."""
    lines = split_lines(text)
    offset = 0  # how far earlier hunks moved the file's lines
    searched_from = 0
    missed: list[tuple[int, Hunk]] = []
    for n, hunk in enumerate(patch.hunks, 1):
        old = hunk.old
        want = max(hunk.old_start - 1 + offset, 0)
        places = [
            i
            for i in range(searched_from, len(lines) - len(old) + 1)
            if lines[i : i + len(old)] == old
        ]
        if not old:  # pure addition (a new file's only hunk)
            places = [min(want, len(lines))]
        if not places:
            missed.append((n, hunk))
            continue
        at = min(places, key=lambda i: abs(i - want))
        lines[at : at + len(old)] = hunk.new
        offset += len(hunk.new) - len(old) + (at - want)
        searched_from = at + len(hunk.new)
    return "".join(lines), missed
