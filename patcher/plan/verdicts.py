"""PURE: the release matrix's verdicts: one release of a package with no host (the file as
the release's wheel ships it), decided by the same choose and rewrite mapping as apply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from patcher.plan.base import adds, choose, rewrite_outcome, rewrite_problem
from patcher.result import Outcome
from patcher.rewrite import apply_edits
from patcher.specs.model import PatchSpec, Variant

MatrixOutcome = Literal[
    "would_apply",
    "satisfied_upstream",
    "anchor_missing",
    "ambiguous",
    "not_covered",
    "no_file",
    "failed",  # the release could not be examined (download, corrupt wheel, unparsable file)
]
# A release with one of these means the spec does not fit it: `vpatch matrix` exits 1.
MATRIX_FAILING: frozenset[MatrixOutcome] = frozenset(
    {"anchor_missing", "ambiguous", "not_covered", "failed"}
)


@dataclass(frozen=True)
class Verdict:
    """A release's answer in `vpatch matrix`: the `[[variant]]` chosen (None: none covers
    it), the outcome and why."""

    variant: int | None
    outcome: MatrixOutcome
    message: str


def matrix_choose(spec: PatchSpec, version: str) -> tuple[int, Variant] | Verdict:
    """(index, variant) whose files must be read, or the final verdict when no file is
    needed. Variant choice is `choose`'s, as on a host."""
    res, index, variant = choose(spec, version)
    if variant is not None:
        return index, variant
    if res.outcome == "satisfied_upstream":
        return Verdict(index, "satisfied_upstream", res.message)
    ranges = "; ".join(v.versions for v in spec.variant)
    return Verdict(None, "not_covered", f"in no variant's range ({ranges})")


def judge_release(index: int, variant: Variant, files: dict[str, bytes | None]) -> Verdict:
    """The verdict of the variant's edits on the release's files (None: not in the wheel), as
    `vpatch apply --dry-run` would say it: `rewrite_outcome`, the worst file deciding."""
    verdicts: list[tuple[Outcome, str]] = []
    for rel, edits in variant.files():
        data = files.get(rel)
        if data is None and not adds(edits):
            return Verdict(index, "no_file", f"{rel} is not in the wheel")
        try:
            text = (data or b"").decode("utf-8")
        except UnicodeDecodeError:
            return Verdict(index, "failed", f"{rel} is not UTF-8 text")
        rw = apply_edits(text, edits)
        if rw.status not in ("changed", "unchanged"):
            return Verdict(index, rewrite_problem(rw.status), f"{rel}: {rw.message}")
        verdicts.append((rewrite_outcome(rw.status), f"{rel}: {rw.message}"))
    changed = any(v == "would_apply" for v, _ in verdicts)
    message = "; ".join(m for _, m in verdicts)
    return Verdict(index, "would_apply" if changed else "satisfied_upstream", message)
