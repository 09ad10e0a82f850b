"""The planner pinned by data: tests/cases/plan/*.json (see tests/support/plancases.py).

Each case runs the pure planner on the case's facts and compares outcomes, message words,
the writes (by text name) and the journal actions. Every apply case that commits is then
committed on paper (files rewritten, the journal folded by the agent's own fold) and planned
again: the second plan must write nothing, pyinfra's idempotence check for operations; and
verify must call every spec apply applied `applied` there (one decision for both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import pytest

from patcher.plan.apply import plan_apply
from patcher.plan.base import Plan
from patcher.plan.preflight import preflight
from patcher.plan.recheck import IN_PLACE, recheck, recheck_specs
from patcher.plan.rollback import plan_rollback
from patcher.plan.verdicts import MatrixOutcome, Verdict, judge_release, matrix_choose
from patcher.plan.verify import (
    judge_probes,
    status_journal,
    verify_recorded,
    verify_spec,
    wants_probes,
)
from patcher.result import Outcome, PatchResult, ProbeResult
from tests.support import plancases
from tests.support.plancases import ROOT, PlanCase


@dataclass
class _Row:
    """A matrix verdict, read like a spec's result."""

    id: str
    outcome: str
    message: str
    variant: int | None
    probes: list[ProbeResult] = field(default_factory=list)


def _ensure(case: PlanCase) -> tuple[list[PatchResult], Plan]:
    """ensure's decisions: apply's plan, then verify of the specs in place on the host as
    the commit left it (its checks answered by the case's probes), folded in by the planner."""
    p = plan_apply(case.specs, case.facts, case.opts)
    level = case.raw["recheck"]
    todo = recheck_specs(case.specs, p.results) if level is not None else []
    after = plancases.after_commit(case, p) if p.needs_commit() else case.facts
    verified = []
    for spec in todo:
        res, _variant = verify_spec(spec, after)
        if wants_probes(res):
            res.probes = [ProbeResult(**x) for x in case.raw.get("probes", {}).get(spec.id, [])]
        judge_probes(res)
        verified.append(res)
    return recheck(p.results, verified), p


def _matrix(case: PlanCase) -> list[_Row]:
    """Each spec's verdict on the case's release: its files read only when a variant needs them."""
    rows = []
    for spec in case.specs:
        got = matrix_choose(spec, case.raw["release"]["version"])
        if not isinstance(got, Verdict):
            got = judge_release(*got, plancases.release_files(case))
        rows.append(_Row(spec.id, got.outcome, got.message, got.variant))
    return rows


def _run(case: PlanCase) -> tuple[list[PatchResult] | list[_Row], Plan | None]:
    cmd = case.raw["command"]
    if cmd == "apply":
        p = plan_apply(case.specs, case.facts, case.opts)
        return p.results, p
    if cmd == "ensure":
        return _ensure(case)
    if cmd == "matrix":
        return _matrix(case), None
    if cmd == "verify":
        return [verify_spec(s, case.facts)[0] for s in case.specs], None
    if cmd == "rollback":
        wanted = case.raw.get("rollback")
        p = plan_rollback(
            None if wanted is None else set(wanted), case.facts, case.opts, case.specs
        )
        return p.results, p
    if cmd == "verify_id":
        return [verify_recorded(i, case.facts, "full")[0] for i in case.raw["ids"]], None
    assert cmd == "status", cmd
    return status_journal(case.facts), None


def _write_names(case: PlanCase, plan: Plan) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for w in plan.writes:
        rel = w.path.removeprefix(ROOT)
        if w.delete:
            out[rel] = "delete"
        elif w.restore is not None:
            name = next((n for n, t in case.texts.items() if plancases.sha(t) == w.restore), None)
            out[rel] = f"restore:{name}"
        else:
            out[rel] = case.text_name(w.text) or f"<unnamed text>\n{w.text}"
    return out


@pytest.mark.parametrize("path", plancases.case_paths(), ids=lambda p: p.stem)
def test_plan_case(path: Path) -> None:
    case = plancases.load(path)
    expect: dict[str, Any] = case.raw["expect"]
    results, plan = _run(case)
    assert {r.id: r.outcome for r in results} == expect["outcomes"], [
        (r.id, r.outcome, r.message) for r in results
    ]
    for sid, words in expect.get("messages", {}).items():
        got = next(r.message for r in results if r.id == sid)
        assert words in got, (sid, got)
    for sid, words in expect.get("unsaid", {}).items():
        got = next(r.message for r in results if r.id == sid)
        assert words not in got, (sid, got)
    for sid, words in expect.get("said_once", {}).items():
        got = next(r.message for r in results if r.id == sid)
        assert got.count(words) == 1, (sid, got)
    assert all(r.message for r in results), "every outcome explains itself"
    for sid, names in expect.get("probes", {}).items():
        assert [p.name for p in next(r.probes for r in results if r.id == sid)] == names
    for sid, index in expect.get("variants", {}).items():
        assert next(r for r in results if isinstance(r, _Row) and r.id == sid).variant == index
    if plan is None:
        return
    assert _write_names(case, plan) == expect.get("writes", {})
    actions = [
        [e["action"], e.get("spec"), str(e["path"]).removeprefix(ROOT)] for e in plan.entries
    ]
    assert actions == expect.get("journal", [])
    names = {plancases.sha(t): n for n, t in case.texts.items()}
    assert [names.get(sha, sha) for sha in plan.gc] == expect.get("gc", [])
    if "backups" in expect:  # --adopt: pip's bytes seeded as the journal's base
        assert [case.text_name(b["text"]) for b in plan.backups] == expect["backups"]
        assert all(plancases.sha(b["text"]) == b["sha256"] for b in plan.backups)
    if "checks" in expect:
        assert sorted(plan.checks) == sorted(expect["checks"])
    for sid, names in expect.get("check_names", {}).items():
        assert [c["name"] for c in plan.checks[sid]] == names, plan.checks[sid]
    if "preflight" in expect:
        got = preflight(case.facts, plan)
        want = expect["preflight"]
        assert (got is None) if want is None else (got is not None and want in got[0]), got
    if case.raw["command"] in ("apply", "ensure") and plan.needs_commit() and not case.opts.dry_run:
        after = plancases.after_commit(case, plan)
        again = plan_apply(case.specs, after, case.opts)
        assert again.writes == [], [(r.id, r.outcome, r.message) for r in again.results]
        first = {r.id: r.outcome for r in results}
        assert all(
            r.outcome in ("already_applied", "satisfied_upstream", "not_applicable")
            or r.outcome == first[r.id] == "failed"  # a refused spec stays refused
            for r in again.results
        ), [(r.id, r.outcome, r.message) for r in again.results]
        # one decision: what apply wrote, verify accepts
        verdicts = [verify_spec(s, after)[0] for s in case.specs]
        applied = {r.id for r in results if r.outcome == "applied"}
        assert all(v.outcome == "applied" for v in verdicts if v.id in applied), [
            (v.id, v.outcome, v.message) for v in verdicts
        ]


def test_enough_cases_for_every_outcome() -> None:
    """At least 40 cases, and every outcome a planner can reach is pinned by one: a host's,
    ensure's re-check (in place, and failed by a check) and every matrix verdict."""
    cases = [plancases.load(p) for p in plancases.case_paths()]
    assert len(cases) >= 40
    host = [c for c in cases if c.raw["command"] != "matrix"]
    seen = {o for c in host for o in c.raw["expect"]["outcomes"].values()}
    reachable = set(get_args(Outcome)) - {"skipped"}  # skipped: the fleet's, not a plan's
    assert reachable <= seen, sorted(reachable - seen)
    matrix = [c for c in cases if c.raw["command"] == "matrix"]
    verdicts = {o for c in matrix for o in c.raw["expect"]["outcomes"].values()}
    missing = set(get_args(MatrixOutcome)) - verdicts
    assert not missing, sorted(missing)
    ensure = [c for c in cases if c.raw["command"] == "ensure"]
    kept = {o for c in ensure for o in c.raw["expect"]["outcomes"].values()}
    assert set(IN_PLACE) | {"failed"} <= kept, sorted(kept)
