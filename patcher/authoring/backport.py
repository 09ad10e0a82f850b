"""PURE: an upstream diff made against release V, applied to V's pristine files and captured,
what `vpatch backport` writes its spec from (the files come through `read`: the command's
wheel of V).

Every file is taken to its end: a hunk that does not apply is left out and named, the file's
other hunks are still applied and captured, and a file whose capture fails is taken hunk by
hunk (`patcher.authoring.refusals`), so one run names every hunk the spec cannot carry. The
capture is `portable`: its spec goes to other releases than V.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from patcher.authoring import refusals, udiff
from patcher.authoring.capture import Captured, CaptureError, Replay, capture
from patcher.errors import UsageError


@dataclass
class Backported:
    files: list[tuple[str, Captured, str, str]] = field(default_factory=list)  # rel, its
    # edits, V's text, V's text with the diff applied
    notes: list[str] = field(default_factory=list)
    refused: list[refusals.Refusal] = field(default_factory=list)


def attempt(
    pristine: str, rel: str, replay: Replay | None, portable: bool = False
) -> refusals.Attempt:
    """A capture of `rel` from `pristine`: None when it succeeds, else why it cannot."""

    def run(edited: str) -> str | None:
        try:
            capture(pristine, edited, rel, replay, portable=portable)
        except CaptureError as exc:
            return refusals.why(str(exc), rel)
        return None

    return run


def which(
    rel: str,
    pristine: str,
    hunks: Sequence[tuple[int, udiff.Hunk]],
    exc: CaptureError,
    each: refusals.Attempt,
) -> list[refusals.Refusal]:
    """The hunks (numbered) the capture of `rel` failed on (`exc`), each tried alone by
    `each` (`attempt`)."""
    return refusals.uncaptured(rel, pristine, hunks, each, refusals.why(str(exc), rel))


def summary(diff: str, package: str, version: str) -> str:
    """A back-ported spec's one line: where it came from (an upstream diff, not a host's
    hand edit), unless --summary names another."""
    name = "the diff on stdin" if diff == "-" else PurePath(diff).name
    return f"Backport of {name} (an upstream diff against {package} {version}), captured"


def refused(done: Backported) -> refusals.Refused:
    """What the command says of a diff some hunks of which the spec cannot carry."""
    hint = "leave these hunks out of the diff and write them by hand (docs/spec.md)"
    if any(r.reason.startswith("does not apply") for r in done.refused):
        hint = "make the diff against that release (--from-version), or leave these hunks out"
    return refusals.Refused(done.refused, hint)


def capture_diff(
    patches: Sequence[udiff.FilePatch],
    read: Callable[[str], str],
    replay: Replay | None,
    release: str,
) -> Backported:
    """Each file of the diff applied to `read(file)` (V's text; "" for a file the diff
    creates) and captured; `release` names V in what is refused."""
    out = Backported()
    for fp in patches:
        if fp.new_path is None:
            raise UsageError(f"{fp.rel}: the diff deletes it", "a spec cannot remove a file")
        if not fp.rel.endswith(".py"):
            out.notes.append(f"{fp.rel}: not a .py file; not captured")
            continue
        pristine = read(fp.rel) if fp.old_path else ""
        patched, missed = udiff.place(pristine, fp)
        gone = f"does not apply to {release}: {udiff.NOT_THERE}"
        mine = [refusals.refusal(fp.rel, n, hunk, gone) for n, hunk in missed]
        placed = [(n, h) for n, h in enumerate(fp.hunks, 1) if all(h is not m for _, m in missed)]
        try:
            cap = capture(pristine, patched, fp.rel, replay, portable=True) if placed else None
        except CaptureError as exc:
            each = attempt(pristine, fp.rel, replay, portable=True)
            mine += which(fp.rel, pristine, placed, exc, each)
            cap = None
        out.refused += sorted(mine, key=lambda r: r.number)
        if cap is not None:
            out.notes.extend(cap.notes)
            if cap.edits:
                out.files.append((fp.rel, cap, pristine, patched))
    return out
