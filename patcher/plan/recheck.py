"""PURE: ensure's second look: apply first, then a verify of what was already in place."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from patcher.result import GOOD, Outcome, PatchResult
from patcher.specs.model import PatchSpec

IN_PLACE: tuple[Outcome, ...] = ("already_applied", "satisfied_upstream")


def recheck_specs(specs: Sequence[PatchSpec], applied: Sequence[PatchResult]) -> list[PatchSpec]:
    """The specs ensure's `--level` verifies again: those apply found in place without a
    write (what apply wrote, apply's own checks already judged)."""
    in_place = {r.id for r in applied if r.outcome in IN_PLACE}
    return [s for s in specs if s.id in in_place]


def recheck(applied: Sequence[PatchResult], verified: Sequence[PatchResult]) -> list[PatchResult]:
    """The results ensure reports: apply's, each re-checked spec with verify's probes, and
    verify's outcome where it is not good or a probe failed (the check decides, not apply)."""
    by_id = {v.id: v for v in verified}
    out: list[PatchResult] = []
    for res in applied:
        v = by_id.get(res.id)
        if v is None:
            out.append(res)
        elif v.outcome not in GOOD["verify"] or not all(p.ok for p in v.probes):
            out.append(replace(res, outcome=v.outcome, message=v.message, probes=v.probes))
        else:
            out.append(replace(res, probes=v.probes))
    return out
