"""Per host: inspect -> plan -> commit -> verify -> record. An executor, nothing more.

Every decision (variant, outcome, bytes to write, journal entries, what to undo) is made by the
pure planner, `patcher.plan`; this module carries the host's facts to it and the plan's writes
back to the agent, in one agent session per host. The one costly step, a libcst rewrite, is
cached for the run (`rewrite_cache.Caches`): 32 hosts with the same file cost one parse.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from patcher import rewrite_cache
from patcher.agent import protocol
from patcher.errors import AgentError, HostError, VpatchError
from patcher.plan import (
    HostFacts,
    Level,
    Options,
    Plan,
    checks_for,
    drift_state,
    judge_probes,
    not_done,
    plan_apply,
    plan_redo,
    plan_rollback,
    plan_undo,
    preflight,
    sha256_text,
    status_journal,
    still_needed,
    undone,
    unified_diff,
    verify_failed,
    verify_recorded,
    verify_spec,
    wanted_files,
    wants_probes,
)
from patcher.result import HostResult, ProbeResult, host_ok
from patcher.spec import PatchSpec
from patcher.transport import Transport

__all__ = ["Level", "Options", "drift_state", "sha256_text", "unified_diff"]

_CONFLICT_RETRIES = 3
# TEST-ONLY: a fault point spec (patcher/agent/faults.py) sent with every commit request, so the
# crash tests reach agents over SSH too. Deliberately not a CLI flag; unset, nothing changes.
TEST_FAULT_ENV = "VPATCH_TEST_FAULT"


CACHES = rewrite_cache.Caches()  # one run = one process; the CLI reads its stats for --json
REWRITE_STATS = CACHES.stats


def _call(transport: Transport, request: dict[str, Any]) -> dict[str, Any]:
    res = transport.call(request)
    if not res.get("ok"):
        kind = str(res.get("kind", ""))
        raise AgentError(
            f"{transport.target}: {res.get('error')}", protocol.HINTS.get(kind, ""), kind
        )
    return res


def _inspect(
    transport: Transport,
    specs: Sequence[PatchSpec],
    state_dir: str | None,
    host: HostResult,
    procs: bool = False,
) -> HostFacts:
    """ONE agent call for every fact about the host (with `procs`, the restart-required scan
    rides along). A transaction a crash left half-written is repaired first, then looked at
    again: no decision is ever made on a half-patched host."""
    for _ in range(2):
        request: dict[str, Any] = {
            "op": "inspect",
            "packages": wanted_files(specs),
            "state_dir": state_dir,
            "known": sorted(CACHES.content),
        }
        if procs:
            request["procs_for"] = [s.id for s in specs]
        res = _call(transport, request)
        _fill_texts(res)
        if not res.get("incomplete"):
            break
        done = _call(transport, {"op": "repair", "state_dir": state_dir})
        host.notes.extend(done.get("notes", []))
    facts = HostFacts.from_answer(res)
    host.python, host.warnings = facts.python, facts.warnings
    return facts


def _fill_texts(res: dict[str, Any]) -> None:
    for pkg in res.get("packages", {}).values():
        for info in pkg.get("files", {}).values():
            sha = info.get("sha256")
            if info.get("text") is not None and sha:
                CACHES.content[sha] = info["text"]
            elif info.pop("cached", False) and sha in CACHES.content:
                info["text"] = CACHES.content[sha]
    for st in res.get("journal", {}).values():
        text = st.get("current_text")
        if isinstance(text, str) and st.get("current"):
            CACHES.content[st["current"]] = text
        elif st.get("current") in CACHES.content:
            st["current_text"] = CACHES.content[st["current"]]


def _commit(transport: Transport, plan: Plan, state_dir: str | None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "op": "commit",
        "writes": [w.request() for w in plan.writes],
        "journal": plan.entries,
        "state_dir": state_dir,
        "gc": plan.gc,
    }
    if plan.backups:  # apply --adopt: pip's bytes become the backup the journal's base names
        request["backups"] = plan.backups
    fault = os.environ.get(TEST_FAULT_ENV)
    if fault:  # TEST-ONLY (patcher/agent/faults.py): crash the agent at a named commit step
        request["fault"] = fault
    return _call(transport, request)


def _retrying(host: HostResult, done: frozenset[str], once: Callable[[], None]) -> None:
    """Run `once`; when the agent refused the commit because a file changed after inspect (a
    concurrent run), plan again from a fresh inspect, up to _CONFLICT_RETRIES times. On any
    other failure (refused, or outcome unknown: agent killed, connection cut) no spec that
    would have written is reported as done."""
    for attempt in range(_CONFLICT_RETRIES):
        try:
            once()
            return
        except VpatchError as exc:
            kind = exc.kind if isinstance(exc, AgentError) else ""
            if kind == protocol.CONFLICT and attempt + 1 < _CONFLICT_RETRIES:
                continue
            not_done(host.patches, done, exc.message)
            raise


def _run_checks(transport: Transport, checks: list[dict[str, Any]]) -> list[ProbeResult]:
    if not checks:
        return []
    res = _call(transport, {"op": "verify", "checks": checks})
    return [
        ProbeResult(c["name"], bool(c["ok"]), str(c["detail"]), float(c.get("seconds", 0)))
        for c in res["checks"]
    ]


def _host_run(command: str, transport: Transport, body: Callable[[HostResult], None]) -> HostResult:
    started = time.monotonic()
    host = HostResult(target=transport.target)
    try:
        body(host)
    except VpatchError as exc:
        host.error, host.hint = exc.message, exc.hint or None
    host.ok = host_ok(command, host)
    host.seconds = round(time.monotonic() - started, 3)
    return host


# ---------------------------------------------------------------------------------------------
# Commands


Pristine = Callable[[str, str, str], str | None]  # (package, version, file) -> pip's text


def _with_record_texts(facts: HostFacts, pristine: Pristine) -> HostFacts:
    """apply --adopt: pip's bytes (the controller fetches them from the wheel) of every file
    that differs from RECORD, for the planner to record as the journal's base."""
    files = {
        pkg: {
            rel: replace(f, record_text=pristine(pkg, str(facts.versions[pkg]), rel))
            if f.exists and f.record_sha256 and f.sha256 != f.record_sha256
            else f
            for rel, f in fs.items()
        }
        for pkg, fs in facts.files.items()
    }
    return replace(facts, files=files)


def apply(
    specs: list[PatchSpec],
    transport: Transport,
    opts: Options,
    state_dir: str | None = None,
    pristine: Pristine | None = None,
) -> HostResult:
    def once(host: HostResult) -> None:
        facts = _inspect(transport, specs, state_dir, host)
        if opts.adopt and pristine is not None:
            facts = _with_record_texts(facts, pristine)
        plan = plan_apply(specs, facts, opts, CACHES.rewrite)
        host.patches = plan.results
        problem = preflight(facts, plan) if plan.writes else None
        if problem:
            raise HostError(f"{problem[0]}; nothing was changed", problem[1])
        if opts.dry_run or not plan.needs_commit():
            return
        host.restart_required = _commit(transport, plan, state_dir).get("restart_required", [])
        undo = lambda p, failed: plan_undo(p, failed, "verify failed")  # noqa: E731
        if _recheck(transport, plan, opts.level, state_dir, undo, verify_failed):
            host.restart_required = []  # every write was undone: disk = what they loaded

    done = frozenset({"applied", "would_apply"})
    return _host_run("apply", transport, lambda host: _retrying(host, done, lambda: once(host)))


def _recheck(
    transport: Transport,
    plan: Plan,
    level: Level,
    state_dir: str | None,
    undo: Callable[[Plan, set[str]], Plan],
    say: Callable[[set[str], ProbeResult | None], str],
) -> bool:
    """Run each spec's checks on what was just written; if any fails, commit `undo`'s plan
    (the previous bytes back) and put `say`'s words on every spec it touched. True when every
    write was undone."""
    failed: dict[str, ProbeResult] = {}
    ids = {r.id for r in plan.results}
    for sid, checks in plan.checks.items():
        got = _run_checks(transport, [] if level == "static" else checks)
        if sid in ids:
            plan.result(sid).probes = got
        bad = next((p for p in got if not p.ok), None)
        if bad is not None:
            failed[sid] = bad
    if not failed:
        return False
    back = undo(plan, set(failed))
    _commit(transport, back, state_dir)
    return undone(plan, back, failed, say)


def verify(
    specs: list[PatchSpec],
    transport: Transport,
    opts: Options,
    state_dir: str | None = None,
    ids: Sequence[str] = (),
) -> HostResult:
    """Specs by their files and edits; `ids` (no spec file at hand) by the journal alone."""

    def body(host: HostResult) -> None:
        facts = _inspect(transport, specs, state_dir, host, procs=True)
        host.restart_required = facts.restart_required
        got = None
        if opts.metrics_url:
            from patcher import metrics  # `verify --metrics` only

            got = metrics.scrape(transport, opts.metrics_url, window=opts.metrics_window)
        for spec in specs:
            res, variant = verify_spec(spec, facts, CACHES.rewrite)
            host.patches.append(res)
            if wants_probes(res):
                res.probes = _run_checks(transport, checks_for(spec, variant, opts.level))
            if got is not None:
                loaded = judge_probes(res, dry=True)
                stale = len(host.restart_required)
                res.probes.append(
                    metrics.probe(got, spec.metrics, opts.min_acceptance, loaded, stale)
                )
            judge_probes(res)
        for sid in ids:
            res, checks = verify_recorded(sid, facts, opts.level)
            host.patches.append(res)
            if res.outcome == "applied":
                res.probes = _run_checks(transport, checks)
            judge_probes(res)

    return _host_run("verify", transport, body)


def rollback(
    specs: list[PatchSpec] | None,
    transport: Transport,
    opts: Options,
    state_dir: str | None = None,
    ids: Sequence[str] = (),
) -> HostResult:
    """Undo specs (all vpatch did, when `specs` is None and no `ids`), keeping the others: the
    files are rebuilt from the journal, and the kept specs' recorded checks run again; if one
    fails, the previous bytes go back and the error names the spec that needs the other."""
    wanted = None if specs is None and not ids else {s.id for s in specs or []} | set(ids)

    def once(host: HostResult) -> None:
        facts = _inspect(transport, specs or [], state_dir, host)
        plan = plan_rollback(wanted, facts, opts, specs or [])
        host.patches = plan.results
        if opts.dry_run or not plan.needs_commit():
            return
        host.restart_required = _commit(transport, plan, state_dir).get("restart_required", [])
        redo = lambda p, failed: plan_redo(p, facts)  # noqa: E731
        _recheck(transport, plan, opts.level, state_dir, redo, still_needed)

    done = frozenset({"rolled_back"})
    return _host_run("rollback", transport, lambda host: _retrying(host, done, lambda: once(host)))


def status(
    specs: list[PatchSpec], transport: Transport, opts: Options, state_dir: str | None = None
) -> HostResult:
    """With specs: their static verify. Without: everything the journal says vpatch applied."""
    if specs:
        host = verify(specs, transport, Options(level="static"), state_dir)
        host.ok = host_ok("status", host)
        return host

    def body(host: HostResult) -> None:
        facts = _inspect(transport, [], state_dir, host)
        host.patches = status_journal(facts)

    return _host_run("status", transport, body)


def connect_error(target: str, exc: HostError) -> HostResult:
    return HostResult(target=target, ok=False, error=exc.message, hint=exc.hint or None)
