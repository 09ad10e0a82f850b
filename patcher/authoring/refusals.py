"""PURE: the hunks a spec cannot carry, every one of them named in one run.

Why: `vpatch backport` (an upstream diff) and `vpatch capture` (a host's hand edit) stopped at
the first hunk that did not apply, or at the first file that could not be captured, without
saying which of its changes was the cause: a user who left one hunk out ran again to meet the
next. Here each hunk that does not apply, and each that cannot be captured, is a `Refusal`: the
file, the hunk's number and header, the old side's lines, and why. A file that cannot be
captured is taken hunk by hunk, each applied alone to the pristine text and captured; a hunk
that fails alone is named with its own reason, and where every hunk captures alone but not
with the others, they are named together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from patcher.authoring import udiff
from patcher.errors import VpatchError
from patcher.plan.fastdiff import split_lines, unified_diff

# A capture of the file's text with some hunks applied: None, or why it cannot be captured
Attempt = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Refusal:
    file: str
    number: int  # the hunk's place in its file's part of the diff, from 1
    header: str
    first: int  # the old side's lines the hunk covers (its header's numbers)
    last: int
    reason: str  # what is wrong, said after the hunk ("does not apply: ...")

    def text(self) -> str:
        where = f"hunk {self.number} ({self.header}, lines {self.first}-{self.last})"
        return f"{self.file}: {where} {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "hunk": self.number,
            "header": self.header,
            "lines": [self.first, self.last],
            "reason": self.reason,
        }


def refusal(rel: str, number: int, hunk: udiff.Hunk, reason: str) -> Refusal:
    last = hunk.old_start + max(len(hunk.old), 1) - 1
    return Refusal(rel, number, hunk.header, hunk.old_start, last, reason)


def hunks_of(rel: str, pristine: str, edited: str) -> list[udiff.Hunk]:
    """A hand edit as the hunks of its unified diff (three lines of context, as `vpatch diff`
    shows it), to name what `vpatch capture` could not carry."""
    text = "".join(unified_diff(split_lines(pristine), split_lines(edited), f"a/{rel}", f"b/{rel}"))
    return udiff.parse(text)[0].hunks if text else []


def uncaptured(
    rel: str,
    pristine: str,
    hunks: Sequence[tuple[int, udiff.Hunk]],
    attempt: Attempt,
    reason: str,
) -> list[Refusal]:
    """Which of the file's hunks (numbered) its capture failed on (`reason`, the whole file's):
    each applied alone to `pristine` and captured by `attempt`."""
    out: list[Refusal] = []
    for n, hunk in hunks:
        alone, missed = udiff.place(pristine, udiff.FilePatch(rel, rel, [hunk]))
        why = udiff.NOT_THERE if missed else attempt(alone)
        if why is not None:
            out.append(refusal(rel, n, hunk, f"cannot be captured: {why}"))
    if out or not hunks:
        return out
    together = f"cannot be captured with the file's other hunks (each can alone): {reason}"
    return [refusal(rel, n, hunk, together) for n, hunk in hunks]


def why(message: str, rel: str) -> str:
    """A CaptureError's message without the file it starts with (the refusal names it)."""
    return message.removeprefix(f"{rel}: ")


class Refused(VpatchError):
    """The hunks a spec cannot carry, every one (`refused`); exit `exit_code` (1, or 2 where
    a hunk does not apply to the release: the diff was made against another)."""

    def __init__(self, refused: Sequence[Refusal], hint: str) -> None:
        super().__init__("; ".join(r.text() for r in refused), hint)
        self.refused = list(refused)
        if any(r.reason.startswith("does not apply") for r in refused):
            self.exit_code = 2
