"""PURE: what one file of a spec comes to in apply's plan (patcher.plan.apply): a step of the
spec's work, or the problem that is the spec's outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from patcher.plan.hostfacts import FileFact

# What one file of a spec comes to in apply's plan: a step of the spec's work (written,
# already there, adopted, relying on another spec), or a problem, which is the spec's outcome.
Step = Literal["changed", "unchanged", "already_applied", "adopt", "rely"]
Problem = Literal["failed", "anchor_missing", "ambiguous", "drifted", "modified"]


@dataclass(frozen=True, kw_only=True)
class Part:
    fact: FileFact
    outcome: Step | Problem
    message: str
    before: str | None = None
    after: str | None = None
    relies: list[str] = field(default_factory=list)  # "rely": the specs holding its code
    base: str | None = None  # the file's new base (vpatch's edits out, hand edits in)
    created: bool = False  # --adopt of a module added by hand: journaled as created
    baked: bool = False  # already_applied: pip's bytes of a wheel `vpatch wheel` built

    @property
    def problem(self) -> Problem | None:
        """The spec's outcome when this file stops it; None for a step of its work."""
        match self.outcome:
            case "failed" | "anchor_missing" | "ambiguous" | "drifted" | "modified":
                return self.outcome
            case _:
                return None
