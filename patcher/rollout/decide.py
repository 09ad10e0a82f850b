"""`vpatch rollout`: the decisions, pure. Which step a host takes next, and whether the live
numbers after the restart are good enough to keep the patch.

A patch can load and still serve worse: the EAGLE-3 whitelist patch loaded, vLLM then accepted
~15 % of the drafts and served 0.66x the tokens/s. So a rollout does, per host,

    baseline (scrape, window, scrape) -> apply (+ verify) -> restart -> health
        -> window (scrape, wait, scrape) -> gates (still healthy, not restarted since) -> kept
    any failure after apply -> rollback -> restart -> health -> rolled_back

and judges the gates from counter DELTAS of two scrapes, never from one scrape's lifetime
totals: the server restarted, and what it did before the restart is the baseline, not the
patch. A measure that cannot be computed (no drafts, no baseline tokens) is a FAILED gate
with that reason unless `--allow-no-traffic`: "no evidence" must never read as "good".

Everything here is data in, data out (golden cases in tests/cases/rollout/; resuming from a
report and the hosts' journals: patcher/rollout/resume.py); the executor
(patcher/rollout/walk.py) scrapes, restarts and polls, and asks these functions what follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from patcher.agent import protocol
from patcher.serving.gates import Gates, pct
from patcher.serving.judging import Gate, gates_detail, judge
from patcher.serving.measures import Measures, measure, measure_series
from patcher.serving.model import Counters, parse

__all__ = [
    "Counters",
    "Gate",
    "Gates",
    "Measures",
    "gates_detail",
    "judge",
    "measure",
    "measure_series",
    "parse",
    "pct",
]

# Steps, in the order a host takes them; the last three only after a failure. The names are
# the journal's (protocol.ROLLOUT_STEPS): the agent checks a step entry by them.
STEPS = protocol.ROLLOUT_STEPS
(
    BASELINE,
    APPLY,
    RESTART,
    HEALTH,
    WINDOW,
    GATES,
    ROLLBACK,
    ROLLBACK_RESTART,
    ROLLBACK_HEALTH,
) = STEPS

# Verdicts: what a host ended as (protocol.ROLLOUT_VERDICTS, the same order).
VERDICTS = protocol.ROLLOUT_VERDICTS
(
    KEPT,  # patched, restarted, healthy, gates passed
    ROLLED_BACK,  # a step failed; the patch is out again, restarted and healthy
    NOT_APPLIED,  # apply failed (its transaction left the files as they were)
    UNTOUCHED,  # the baseline failed: nothing was written, nothing restarted
    ATTENTION,  # a step failed and so did the way back, or the records disagree: a person
    INTERRUPTED,  # stopped between two steps (Ctrl-C): `vpatch rollout --resume` continues
) = VERDICTS

# ---------------------------------------------------------------------------------------------
# The step machine


@dataclass(frozen=True)
class Plan:
    """What this rollout does on a host: which optional steps exist."""

    metrics: bool
    restart: bool
    health: bool

    def forward(self) -> list[str]:
        steps = [BASELINE] if self.metrics else []
        steps.append(APPLY)
        steps += [RESTART] if self.restart else []
        steps += [HEALTH] if self.health else []
        steps += [WINDOW, GATES] if self.metrics else []
        return steps

    def back(self) -> list[str]:
        steps = [ROLLBACK]
        steps += [ROLLBACK_RESTART] if self.restart else []
        steps += [ROLLBACK_HEALTH] if self.health else []
        return steps


@dataclass
class Phase:
    """One step as it ran on one host: the JSON document carries every one, with its times."""

    step: str
    ok: bool
    detail: str = ""
    started: str = ""  # UTC, ISO 8601
    seconds: float = 0.0


def next_step(plan: Plan, done: Sequence[tuple[str, bool]]) -> str | None:
    """The step after `done` ((step, ok) in the order they ran); None: the host is finished.

    A failure before anything was written (baseline) or inside apply's own transaction (apply
    undoes its writes when its verify fails) ends the host there: there is nothing to roll
    back. A failure after the write starts the way back; a failure on the way back stops it
    (the host keeps whatever it has, and the verdict asks for a person)."""
    if not done:
        return plan.forward()[0]
    last, ok = done[-1]
    if last in plan.back():
        if not ok:
            return None
        back = plan.back()
        i = back.index(last) + 1
        return back[i] if i < len(back) else None
    if not ok:
        return None if last in (BASELINE, APPLY) else ROLLBACK
    forward = plan.forward()
    i = forward.index(last) + 1
    return forward[i] if i < len(forward) else None


def verdict(done: Sequence[tuple[str, bool]]) -> tuple[str, str]:
    """(the step the host reached, its verdict): the first failed step, else the last one."""
    failed = [step for step, ok in done if not ok]
    reached = failed[0] if failed else (done[-1][0] if done else BASELINE)
    if not failed:
        return reached, KEPT
    if any(step == ROLLBACK for step, _ in done) and failed[-1] not in (
        ROLLBACK,
        ROLLBACK_RESTART,
        ROLLBACK_HEALTH,
    ):
        return reached, ROLLED_BACK
    if failed[0] == BASELINE:
        return reached, UNTOUCHED
    if failed[0] == APPLY:
        return reached, NOT_APPLIED
    return reached, ATTENTION


NOTHING = "-"  # the step reached by a host that has not finished one


def outcome(plan: Plan, done: Sequence[tuple[str, bool]]) -> tuple[str, str]:
    """(step reached, verdict) of a host that may have stopped early: a walk the machine
    would still continue is INTERRUPTED at its last step (nothing is assumed of the next),
    and so is one stopped before its first step (NOTHING reached)."""
    if next_step(plan, done) is not None:
        return (done[-1][0] if done else NOTHING), INTERRUPTED
    return verdict(done)


def stopped(
    plan: Plan, done: Sequence[tuple[str, bool]], current: str | None, running: bool
) -> str | None:
    """What a report says of a host whose walk is not over (None: it is over): `current` the
    step it is in (None: between two). `running`: the report is written while the rollout
    runs, after every step (rolloutreport.LiveReport), so that a controller lost right then
    (killed, its machine gone) still leaves a report that says where each host is; else the
    rollout stopped on a Ctrl-C."""
    if next_step(plan, done) is None:
        return None
    reached = done[-1][0] if done else None
    where = (
        f"in the {current} step"
        if current
        else (f"after the {reached} step" if reached else "before its first step")
    )
    if running:
        return (
            f"running: {where} when this report was written (a controller lost then left "
            "it there: --resume continues from the host's journal)"
        )
    return f"interrupted (Ctrl-C) {where}"


def is_walk(plan: Plan, done: Sequence[tuple[str, bool]]) -> bool:
    """Whether `done` is a walk this plan's machine could have taken, step by step."""
    return all(next_step(plan, done[:i]) == step for i, (step, _ok) in enumerate(done))


# ---------------------------------------------------------------------------------------------
# Counters, windows and gates: the serving room's (patcher/serving/), named here for the
# executor and the report


def restarted_since(end: Counters, now: Counters) -> bool:
    """Whether a later scrape shows the server restarted after `end` (a counter went down):
    the process the window measured is gone (it crashed, or something restarted it)."""
    return now.reset_since(end)


def window_done(start: Counters, now: Counters, elapsed: float, window: float, drafts: int) -> bool:
    """The window closes when it has lasted `window` seconds or `drafts` drafts were seen."""
    return elapsed >= window or now.since(start).drafts >= drafts > 0
