"""`vpatch rollout --resume` and `vpatch status`: the rollout steps a host's journal records,
read back, and what a resumed rollout does with each host. Pure, like patcher/rollout/decide.py
(golden cases in tests/cases/rollout/resume/).

A step entry comes from the host (protocol.step_entry, appended by the agent right after the
step ran), so it is checked here with the agent's own shape check before it counts: the host
may lie, and the report a resume starts from may be stale or edited.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from patcher.agent import journal
from patcher.rollout.decide import (
    APPLY,
    CHANGED_SINCE,
    GATES,
    KEPT,
    RESTART,
    ROLLBACK,
    ROLLBACK_RESTART,
    STEPS,
    Phase,
    Plan,
    is_walk,
    next_step,
    outcome,
)
from patcher.serving.measures import Measures

if TYPE_CHECKING:
    from patcher.result import RolloutStep


@dataclass(frozen=True)
class Step:
    """One step entry of a host's journal (protocol.step_entry), as the host sent it back."""

    run: str
    step: str
    ok: bool
    detail: str = ""
    started: str = ""
    seconds: float = 0.0
    verdict: str | None = None
    measures: dict[str, Any] | None = None
    specs: tuple[str, ...] = ()
    ts: str = ""
    undecided: bool = False  # a gates step that failed for want of evidence only
    seen: dict[str, Any] | None = None  # the host as the step left it (agent/seen.py)
    released: bool = False  # a note: `vpatch rollout release` gave the run's lease up here
    steer: dict[str, Any] | None = None  # a note: a steer touched the walk here (steer_entry)

    def walked(self) -> bool:
        """A step of the walk, not a note on it (a release, a steer, a changed_since verdict)."""
        return not self.released and self.steer is None and self.verdict != CHANGED_SINCE

    def phase(self) -> Phase:
        return Phase(self.step, self.ok, self.detail, self.started, float(self.seconds))


def read_steps(raw: Any) -> tuple[list[Step], list[str]]:
    """The step entries of an inspect answer's `rollout` (the journal's newest run), each
    checked by the agent's own shape check (journal._step_error): the host may lie, and an
    entry that is not one is a problem line, never a step."""
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], ["the host's rollout steps are not a list; ignored"]
    out: list[Step] = []
    problems: list[str] = []
    for n, e in enumerate(raw, 1):
        why = journal._step_error(e) if journal.is_step(e) else "not a rollout step entry"
        if why:
            problems.append(f"rollout step {n} from the host's journal ignored: {why}")
            continue
        out.append(
            Step(
                e["run"],
                e["step"],
                e["ok"],
                e.get("detail", ""),
                e.get("started", ""),
                float(e.get("seconds", 0)),
                e.get("verdict"),
                e.get("measures"),
                tuple(e["specs"]),
                e.get("ts", ""),
                bool(e.get("undecided", False)),
                e.get("seen"),
                bool(e.get("released", False)),
                e.get("steer"),
            )
        )
    return out, problems


def measures_of(data: Any) -> Measures | None:
    """A Measures from its to_json() (a journal's or a report's): None unless every number is
    a finite number or None, as to_json writes them."""
    if not isinstance(data, dict):
        return None
    keys = ("acceptance_rate", "mean_acceptance_length", "tokens_per_s", "error_rate")
    vals: list[float | None] = []
    for k in ("seconds", "drafts", *keys):
        v = data.get(k)
        if v is None and k in keys:
            vals.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        vals.append(float(v))
    why = data.get("why") or {}
    if not isinstance(why, dict) or not all(isinstance(v, str) for v in why.values()):
        return None
    seconds, drafts = vals[0], vals[1]
    assert seconds is not None and drafts is not None
    from patcher.serving.measures import extras_of

    extras = extras_of(data)
    if extras is None:
        return None
    return Measures(seconds, drafts, vals[2], vals[3], vals[4], vals[5], dict(why), **extras)


def last_step(raw: Any) -> tuple[RolloutStep | None, list[str]]:
    """`vpatch status`: the newest well-formed step of an inspect answer's `rollout`."""
    from patcher.result import RolloutStep

    steps, problems = read_steps(raw)
    if not steps:
        return None, problems
    # A steer's note is news only until the walk's next step: that step says where it is.
    s = next((s for s in reversed(steps) if s.steer is None), steps[-1])
    return RolloutStep(s.run, s.step, s.ok, s.verdict, s.detail, s.ts, list(s.specs)), problems


def kept_now(step: RolloutStep | None, applied: Sequence[str]) -> RolloutStep | None:
    """`vpatch status`: the newest step as the host is now. A `kept` whose specs are not all
    applied any more (rolled back or reinstalled since, by hand) says so in its detail: the
    verdict is the rollout's word of then, never a claim beside "nothing recorded" now.
    `applied`: the spec ids the journal says are applied on the host now."""
    if step is None or step.verdict != KEPT:
        return step
    gone = [s for s in step.specs if s not in set(applied)]
    if not gone:
        return step
    from dataclasses import replace

    since = f"since then {', '.join(gone)} is not applied here (rolled back or reinstalled)"
    return replace(step, detail=f"{step.detail}; {since}" if step.detail else since)


# What --resume does with a host.
RESUME_DONE = "done"  # its rollout ended (the journal says how): nothing runs on it
RESUME_CONTINUE = "continue"  # the next step after `done` (none done: a fresh start)
RESUME_REFUSE = "refuse"  # the report and the host disagree: touch nothing, a person looks
RESUME_CHANGED = "changed"  # the host changed since its last step: judge nothing, run nothing


@dataclass(frozen=True)
class Resume:
    action: str
    done: tuple[tuple[str, bool], ...] = ()
    why: str = ""
    recorded: bool = False  # RESUME_CHANGED as the host's journal already says (nothing to add)


def resume(
    plan: Plan,
    run: str,
    reported: Sequence[tuple[str, bool]] | None,
    steps: Sequence[Step],
    specs: Sequence[str] = (),
) -> Resume:
    """What `--resume` does with one host, from the report's steps for it (None: never
    started) and the step entries its journal holds (its newest run's).

    The host's journal is what happened there: each step is recorded right after it ran, so
    it is the one to continue from. The report is the controller's word, which may be stale
    (written before the last record, a second Ctrl-C) or edited; it must agree with the host:
    the same walk, or one step behind it, or one step ahead (a step that ran but whose record
    was lost; it runs again: every step may, apply and rollback being hash-checked and
    idempotent), or ahead by steps that failed (their records never reached the host: it,
    or the connection to it, was lost; the host goes on from its journal). Anything else,
    or a walk this rollout's steps cannot take (other options, a forged entry, other specs),
    touches nothing on the host."""
    mine = [s for s in steps if s.run == run and s.walked()]
    if steps and not mine and reported:
        other = steps[-1].run
        return Resume(RESUME_REFUSE, (), f"another rollout (run {other}) ran on the host since")
    done = tuple((s.step, s.ok) for s in mine)
    said = tuple(reported or ())
    if any(s.specs != tuple(specs) for s in mine):
        return Resume(RESUME_REFUSE, done, "its journal's steps are of other specs")
    if not is_walk(plan, done):
        return Resume(RESUME_REFUSE, done, "its journal's steps are not a walk of this rollout")
    if not is_walk(plan, said):
        return Resume(RESUME_REFUSE, done, "the report's steps are not a walk of this rollout")
    lost = said[: len(done)] == done and not all(ok for _step, ok in said[len(done) :])
    if (
        said == done[: len(said)]
        or (len(said) == len(done) + 1 and said[: len(done)] == done)
        or lost
    ):
        if next_step(plan, done) is None:
            return Resume(RESUME_DONE, done)
        return Resume(RESUME_CONTINUE, done)
    return Resume(
        RESUME_REFUSE,
        done,
        f"the report says {_walk(said)}; the host's journal says {_walk(done)}",
    )


def looked(plan: Plan, run: str, decision: Resume, steps: Sequence[Step], now: Any) -> Resume:
    """The decision once the host was looked at again (`now`: the inspect's `seen`): a walk
    that would go on, or that ended `kept`, on a host that changed since its newest step is
    RESUME_CHANGED, with what changed (`changes`); so is one an earlier --resume found
    changed (its verdict in the journal stands: `recorded`). Anything else stands."""
    if decision.action not in (RESUME_CONTINUE, RESUME_DONE):
        return decision
    found = [s for s in steps if s.run == run and s.verdict == CHANGED_SINCE]
    if found:  # an earlier --resume found the host changed: so it stays, nothing runs
        return Resume(RESUME_CHANGED, decision.done, found[-1].detail, recorded=True)
    mine = [s for s in steps if s.run == run and s.walked()]
    if not mine:
        return decision
    gates = [s for s in mine if s.step == GATES]
    undecided = bool(gates) and gates[-1].undecided
    if decision.action == RESUME_DONE and outcome(plan, decision.done, undecided)[1] != KEPT:
        return decision  # its verdict says what the rollout did, not what the host is now
    what = changes(mine[-1].seen, now, next_step(plan, decision.done))
    return Resume(RESUME_CHANGED, decision.done, "; ".join(what)) if what else decision


def changes(then: Any, now: Any, going: str | None) -> list[str]:
    """What changed on the host between a step's `seen` (`then`, the newest its journal
    holds) and an inspect's (`now`), in words (empty: nothing; `then` None: nothing to
    compare, a journal older than `seen`). `going`: the step a resume would run next (None:
    the walk is over); what that step does anyway is not counted: an apply or rollback plans
    from the files as they are (hash-checked), a restart replaces the server.

    The files: each journaled file a spec of the rollout is applied to, with the transaction
    that applied it and its bytes. The server: the environment's processes at the step (only
    steps after which the measured server must stay record them): one gone is a restart."""
    if not isinstance(then, dict) or not isinstance(now, dict):
        return []
    out: list[str] = []
    if going not in (APPLY, ROLLBACK):
        out += _file_changes(then.get("files"), now.get("files"))
    server = then.get("server")
    if going not in (RESTART, ROLLBACK_RESTART) and isinstance(server, list):
        out += _server_changes(server, now.get("server"))
    return out


def _obj(x: Any) -> dict[str, Any]:
    """`x` when it is a JSON object, else an empty one: `seen` comes from the host, which may
    lie; a shape it did not write compares as nothing, never as a traceback."""
    return x if isinstance(x, dict) else {}


def _file_changes(then: Any, now: Any) -> list[str]:
    then, now = _obj(then), _obj(now)
    out: list[str] = []
    for path in sorted(set(then) | set(now)):
        a, b = _obj(then.get(path)), _obj(now.get(path))
        was, got = _obj(a.get("applied")), _obj(b.get("applied"))
        for spec in sorted(set(was) | set(got)):
            if spec not in got:
                out.append(f"{spec} is no longer applied to {path} (rolled back)")
            elif spec not in was:
                out.append(f"{spec} was applied to {path} since (transaction {got[spec]})")
            elif was[spec] != got[spec]:
                out.append(
                    f"{spec} was applied to {path} again since (transaction {got[spec]}, "
                    f"was {was[spec]})"
                )
        if was and got and set(was) == set(got) and a.get("sha256") != b.get("sha256"):
            out.append(f"{path} is not the bytes it was (an upgrade or an edit)")
    return out


def _server_changes(then: list[Any], now: Any) -> list[str]:
    def pairs(procs: Any) -> list[tuple[int, str]]:
        ok = (
            [p for p in procs if isinstance(p, list) and len(p) == 2]
            if isinstance(procs, list)
            else []
        )
        return [(p[0], p[1]) for p in ok if isinstance(p[0], int) and isinstance(p[1], str)]

    alive = set(pairs(now))
    gone = [p for p in pairs(then) if p not in alive]
    if not gone:
        return []
    named = ", ".join(f"pid {pid} (started {start})" for pid, start in gone[:4])
    return [f"the server restarted or stopped: {named} no longer runs"]


def reported_steps(
    hosts: list[Any],
) -> tuple[dict[str, list[tuple[str, bool]] | None], set[str]]:
    """Per host of a report's `hosts`, the (step, ok) it says ran (None: never started), and
    the run ids it names. ValueError: not a report's shape."""
    out: dict[str, list[tuple[str, bool]] | None] = {}
    runs: set[str] = set()
    for h in hosts:
        if not isinstance(h, dict) or not isinstance(h.get("target"), str):
            raise ValueError("a host without a target name")
        r = h.get("rollout")
        if r is None:
            out[h["target"]] = None
            continue
        if isinstance(r, dict) and r.get("control") is True:  # a control host: no walk
            continue
        phases = r.get("phases") if isinstance(r, dict) else None
        if not isinstance(phases, list) or not all(
            isinstance(p, dict) and p.get("step") in STEPS and isinstance(p.get("ok"), bool)
            for p in phases
        ):
            raise ValueError(f"host {h['target']!r}: its phases are not rollout steps")
        run = r.get("run")
        if run is not None:
            if not isinstance(run, str) or not run.isalnum() or len(run) > 64:
                raise ValueError(f"host {h['target']!r}: its run is not an id")
            runs.add(run)
        out[h["target"]] = [(p["step"], p["ok"]) for p in phases]
    return out, runs


def _walk(done: Sequence[tuple[str, bool]]) -> str:
    return " -> ".join(f"{s}{'' if ok else ' (failed)'}" for s, ok in done) or "nothing ran"
