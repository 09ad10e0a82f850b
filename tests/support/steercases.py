"""The golden cases of tests/cases/rollout/steer/, run through patcher.rollout.steer's pure
functions as the controller runs them (patcher.rollout.steering, walk)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from patcher.rollout import decide, steer

CASES = Path(__file__).resolve().parent.parent / "cases" / "rollout" / "steer"
RUN = "r1"


def cases(kind: str) -> list[Path]:
    return sorted((CASES / kind).glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def records(raw: list[dict[str, Any]]) -> list[steer.Steer]:
    """The case's records; run, uid, user and time filled in when a case leaves them out."""
    out = []
    for i, r in enumerate(raw, 1):
        full = {"run": RUN, "seq": i, "uid": 0, "user": "root", "at": f"T{i}", **r}
        out.append(steer.record_of(full))
    return out


def run_walk(case: dict[str, Any]) -> dict[str, Any]:
    """One host's walk, each step failing iff the case says so, with steers written at the
    case's points: `before:STEP` (before the step begins) and `look:STEP` (while its window
    runs: read at its next look). `since`: the newest seq when the host started."""
    plan = decide.Plan(**case["plan"])
    fails = set(case["fails"])
    written: list[dict[str, Any]] = []
    pending = list(case["steers"])
    seen = steer.Seen(since=case.get("since", 0))
    promoted: steer.Steer | None = None
    effects: list[list[str]] = []
    done: list[tuple[str, bool]] = []

    def state(point: str) -> steer.State:
        while pending and pending[0]["at"] == point:
            written.append(pending.pop(0)["record"])
        return steer.fold(records(case.get("before", []) + written), RUN)

    while (step := decide.next_step(plan, done)) is not None:
        assert len(done) < len(decide.STEPS), f"the machine loops: {done}"
        action, s = steer.before_step(state(f"before:{step}"), seen, step)
        if action == steer.STOP and s is not None:
            seen = replace(seen, steered=s.verb)
            effects.append([s.verb, step])
            done.append((step, False))
            continue
        ok = step not in fails
        if step in (decide.BASELINE, decide.WINDOW):
            action, s = steer.at_look(state(f"look:{step}"), seen, step == decide.WINDOW)
            if s is not None:
                seen = replace(seen, steered=s.verb)
                effects.append([s.verb, step])
                ok = ok and action != steer.STOP
                promoted = s if action == steer.END_WINDOW else promoted
        if step == decide.GATES and promoted is not None:
            ok = True  # kept on the owner's word, whatever the gates said
        done.append((step, ok))
    reached, verdict = decide.outcome(plan, done)
    return {
        "steps": [[s, ok] for s, ok in done],
        "reached": reached,
        "verdict": steer.verdict(verdict, seen.steered),
        "steered": effects,
    }


def run_hold(case: dict[str, Any]) -> dict[str, Any]:
    action, s = steer.hold(steer.fold(records(case["records"]), RUN))
    return {"action": action, "seq": s.seq if s is not None else None}


def run_refusal(case: dict[str, Any]) -> dict[str, Any]:
    state = steer.fold(records(case["records"]), RUN)
    said = steer.refusal(state, case["verb"])
    return {"refused": said[0] if said is not None else None, "next_seq": state.last + 1}
