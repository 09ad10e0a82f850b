"""The golden cases of tests/cases/rollout/, run through patcher.rollout.decide's pure functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from patcher.rollout import decide, resume
from patcher.serving.gates import Gates
from patcher.serving.judging import gates_detail, judge
from patcher.serving.measures import Measures, measure
from patcher.serving.model import Counters

CASES = Path(__file__).resolve().parent.parent / "cases" / "rollout"


def step_cases() -> list[Path]:
    return sorted((CASES / "steps").glob("*.json"))


def gate_cases() -> list[Path]:
    return sorted((CASES / "gates").glob("*.json"))


def resume_cases() -> list[Path]:
    return sorted((CASES / "resume").glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def run_steps(case: dict[str, Any]) -> dict[str, Any]:
    """Drive the step machine as the executor does, each step failing iff the case says so,
    and a Ctrl-C (`stop_after`) stopping it once that many steps ran."""
    plan = decide.Plan(**case["plan"])
    fails = set(case["fails"])
    stop = case.get("stop_after")
    done: list[tuple[str, bool]] = []
    while (step := decide.next_step(plan, done)) is not None:
        assert len(done) < len(decide.STEPS), f"the machine loops: {done}"
        if stop is not None and len(done) >= stop:
            break
        done.append((step, step not in fails))
    reached, verdict = decide.outcome(plan, done, bool(case.get("undecided")))
    return {"steps": [s for s, _ in done], "reached": reached, "verdict": verdict}


def _window(data: dict[str, Any]) -> Measures:
    start = Counters.of(data["start"])
    end = Counters.of(data["end"])
    return measure(start, end, float(data["seconds"]))


def run_gates(case: dict[str, Any]) -> dict[str, Any]:
    g = case["gates"]
    gates = Gates.make(**g)
    before = _window(case["baseline"]) if case["baseline"] is not None else None
    after = _window(case["after"])
    ok, detail = gates_detail(judge(before, after, gates))
    measures = after.to_json()
    keep = ("acceptance_rate", "mean_acceptance_length", "tokens_per_s", "error_rate")
    return {"ok": ok, "detail": detail, "after": {k: measures[k] for k in keep}}


def run_resume(case: dict[str, Any]) -> dict[str, Any]:
    """rolloutresume.resume on the case's report steps and journal entries (checked as the
    controller checks what a host sends: rolloutresume.read_steps)."""
    plan = decide.Plan(**case["plan"])
    steps, problems = resume.read_steps(case["journal"])
    assert not problems, problems
    reported = case["reported"]
    said = None if reported is None else [(s, ok) for s, ok in reported]
    got = resume.resume(plan, case["run"], said, steps, case["specs"])
    if "now" in case:  # the host looked at again: its `seen` now (patcher/agent/seen.py)
        got = resume.looked(plan, case["run"], got, steps, case["now"])
    going = got.action == resume.RESUME_CONTINUE
    out: dict[str, Any] = {
        "action": got.action,
        "done": [[s, ok] for s, ok in got.done],
        "next": decide.next_step(plan, got.done) if going else None,
    }
    if got.why:
        out["why"] = got.why
    return out


def live_cases() -> list[Path]:
    return sorted((CASES / "live").glob("*.json"))


def run_live(case: dict[str, Any]) -> list[dict[str, Any]]:
    """What a report written as the rollout goes (rolloutrun.LiveReport) says of the host as
    each step begins (every earlier one done), and once its walk is over."""
    plan = decide.Plan(**case["plan"])
    fails = set(case["fails"])
    done: list[tuple[str, bool]] = []
    out: list[dict[str, Any]] = []

    def say(current: str | None) -> None:
        reached, verdict = decide.outcome(plan, done)
        says = decide.stopped(plan, done, current, running=True)
        out.append({"in": current, "reached": reached, "verdict": verdict, "says": says})

    while (step := decide.next_step(plan, done)) is not None:
        assert len(done) < len(decide.STEPS), f"the machine loops: {done}"
        say(step)
        done.append((step, step not in fails))
    say(None)
    return out
