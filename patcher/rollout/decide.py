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
from dataclasses import dataclass, replace

from patcher.agent import protocol
from patcher.serving import stats
from patcher.serving.judging import Gate, gates_detail
from patcher.serving.model import Counters

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
    NOT_ENOUGH_EVIDENCE,  # rolled back as ROLLED_BACK, because the window ended undecided
    CHANGED_SINCE,  # --resume found the host changed since its last step: nothing judged, run
    PROMOTED,  # kept on its owner's word (`vpatch rollout promote`): patched, as KEPT
    ABORTED,  # its owner aborted the run: rolled back (or nothing written), as ROLLED_BACK
) = VERDICTS
PATCHED = (KEPT, PROMOTED)  # the verdicts of a host that stays patched

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


def verdict(done: Sequence[tuple[str, bool]], undecided: bool = False) -> tuple[str, str]:
    """(the step the host reached, its verdict): the first failed step, else the last one.
    `undecided`: the gates step failed because the window ended before its evidence decided
    (not because it showed the patch serves worse): a host rolled back for that is
    NOT_ENOUGH_EVIDENCE, its own word (it was not proven good, nor proven bad)."""
    failed = [step for step, ok in done if not ok]
    reached = failed[0] if failed else (done[-1][0] if done else BASELINE)
    if not failed:
        return reached, KEPT
    if any(step == ROLLBACK for step, _ in done) and failed[-1] not in (
        ROLLBACK,
        ROLLBACK_RESTART,
        ROLLBACK_HEALTH,
    ):
        return reached, NOT_ENOUGH_EVIDENCE if undecided and reached == GATES else ROLLED_BACK
    if failed[0] == BASELINE:
        return reached, UNTOUCHED
    if failed[0] == APPLY:
        return reached, NOT_APPLIED
    return reached, ATTENTION


NOTHING = "-"  # the step reached by a host that has not finished one


def outcome(
    plan: Plan, done: Sequence[tuple[str, bool]], undecided: bool = False
) -> tuple[str, str]:
    """(step reached, verdict) of a host that may have stopped early: a walk the machine
    would still continue is INTERRUPTED at its last step (nothing is assumed of the next),
    and so is one stopped before its first step (NOTHING reached)."""
    if next_step(plan, done) is not None:
        return (done[-1][0] if done else NOTHING), INTERRUPTED
    return verdict(done, undecided)


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


# A gate's final decision when the window's last look left its evidence short: no look follows,
# so it is not `extend` any more (patcher.serving.stats' PASS / FAIL / EXTEND are a look's).
SHORT = "not_enough_evidence"


def settle(judged: Sequence[Gate]) -> list[Gate]:
    """The gates as the window's last look left them (judge's `last`): a gate that failed
    because its evidence was still short says so in its evidence too (decision SHORT)."""
    out = []
    for g in judged:
        ev = g.evidence
        if not g.ok and ev is not None and ev.decision == stats.EXTEND:
            g = replace(g, evidence=replace(ev, decision=SHORT))
        out.append(g)
    return out


def undecided(judged: Sequence[Gate]) -> bool:
    """Whether the gates failed only for want of evidence: every failed gate's evidence is
    short (SHORT or EXTEND), none showed the patch worse, none could not be computed."""
    failed = [g for g in judged if not g.ok]
    return bool(failed) and all(
        g.evidence is not None and g.evidence.decision in (SHORT, stats.EXTEND) for g in failed
    )


def gates_outcome(judged: Sequence[Gate]) -> tuple[bool, str]:
    """(all passed, the gates step's one line): gates_detail's, except that a window that
    ended undecided is said so ("not enough evidence: ..."), never "serves worse"."""
    ok, detail = gates_detail(judged)
    if ok or not undecided(judged):
        return ok, detail
    head = "not enough evidence: "
    parts = [f"{g.name} {g.detail.removeprefix(head)}" for g in judged if not g.ok]
    parts += [f"{g.name} {g.detail}" for g in judged if g.ok]
    return False, head + "; ".join(parts)


def shortfall(judged: Sequence[Gate]) -> str:
    """What each undecided gate had when the window ended, against what it needed: the
    numbers the not_enough_evidence hint gives."""
    out = []
    for g in judged:
        ev = g.evidence
        if g.ok or ev is None or ev.decision not in (SHORT, stats.EXTEND):
            continue
        if ev.test == "mann-whitney" and ev.n < stats.MIN_SAMPLES:
            out.append(f"{g.name}: {ev.n:g} samples a side, its test needs {stats.MIN_SAMPLES}")
        elif ev.test == "t-mixture" and ev.low is None:
            out.append(f"{g.name}: {ev.n:g} intervals, too few to bound its ratio")
        else:
            out.append(f"{g.name}: {ev.numbers()}, undecided at the window's end")
    return "; ".join(out)


def window_done(start: Counters, now: Counters, elapsed: float, window: float, drafts: int) -> bool:
    """The window closes when it has lasted `window` seconds or `drafts` drafts were seen."""
    return elapsed >= window or now.since(start).drafts >= drafts > 0
