"""Per host: inspect -> plan -> commit -> verify -> record, for apply, verify, rollback and
status. An executor, nothing more.

Every decision (variant, outcome, bytes to write, journal entries, what to undo) is made by the
pure planner, `patcher.plan`; this module carries the host's facts to it and the plan's
writes
back to the agent, in one agent session per host. How the requests travel (one exchange when
a plan made ahead matches) and what a run shares across its hosts (texts, rewrites, counts) is
`patcher.run.exchange`'s: every command takes the run's `RunContext`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from patcher.agent import protocol
from patcher.errors import AgentError, HostError, Unsupported, VpatchError
from patcher.output import progress
from patcher.plan import monitor
from patcher.plan.apply import plan_apply, preflight
from patcher.plan.base import (
    Level,
    Options,
    Plan,
    checks_for,
    drift_state,
    sha256_text,
    unified_diff,
)
from patcher.plan.hostfacts import HostFacts
from patcher.plan.rollback import plan_rollback
from patcher.plan.undo import (
    could_not_check,
    not_done,
    plan_redo,
    plan_undo,
    still_needed,
    undone,
    verify_failed,
)
from patcher.plan.verify import (
    judge_probes,
    status_journal,
    verify_recorded,
    verify_spec,
    wants_probes,
)
from patcher.result import HostResult, PatchResult, ProbeResult, host_ok
from patcher.run import exchange
from patcher.run.exchange import TEST_FAULT_ENV, Guess, RunContext, checked, probes, run_checks
from patcher.specs.model import PatchSpec
from patcher.transports import Transport

__all__ = [
    "TEST_FAULT_ENV",
    "Level",
    "Options",
    "RunContext",
    "drift_state",
    "sha256_text",
    "unified_diff",
]

Command = Literal["apply", "verify", "rollback", "status"]
Pristine = Callable[[str, str, str], str | None]  # (package, version, file) -> pip's text
Ran = dict[str, list[ProbeResult]]  # spec id -> the results of its checks in a commit's chain
_CONFLICT_RETRIES = 3


def run(
    command: Command | str,
    specs: Sequence[PatchSpec] | None,
    transport: Transport,
    opts: Options,
    ctx: RunContext,
    *,
    state_dir: str | None = None,
    ids: Sequence[str] = (),
    pristine: Pristine | None = None,
) -> HostResult:
    """The result of `command` (apply, verify, rollback, status) on one host, in the run `ctx`.
    `specs` None (rollback): all that vpatch did there; `ids`: specs by id, from the journal
    alone (rollback, verify); `pristine`: pip's text of a file (apply --adopt, and naming a
    hand edit's lines)."""
    if command == "apply":
        return apply(list(specs or []), transport, opts, state_dir, pristine, ctx=ctx)
    if command == "verify":
        return verify(list(specs or []), transport, opts, state_dir, ids, pristine, ctx=ctx)
    if command == "rollback":
        wanted = None if specs is None else list(specs)
        return rollback(wanted, transport, opts, state_dir, ids, ctx=ctx)
    if command == "status":
        return status(list(specs or []), transport, opts, state_dir, ctx=ctx)
    raise ValueError(f"no per-host command {command!r}")


# A commit asks for the environment's lock for exchange.LOCK_POLL_S; held by another vpatch,
# the run says once on stderr that it waits, plans again from a fresh inspect (what the other
# run wrote counts) and asks again, for at most LOCK_WAIT_S in all. Then it fails, saying who
# holds what.
LOCK_WAIT_S = 30.0


def _retrying(host: HostResult, done: frozenset[str], once: Callable[[], None]) -> None:
    """Run `once`; when the agent refused the commit because a file changed after inspect (a
    concurrent run), plan again from a fresh inspect, up to _CONFLICT_RETRIES times; while
    another vpatch holds the lock, wait for it (said on stderr), up to LOCK_WAIT_S. On any
    other failure (refused, or outcome unknown: agent killed, connection cut) no spec that
    would have written is reported as done."""
    conflicts = 0
    deadline: float | None = None
    while True:
        try:
            once()
            return
        except VpatchError as exc:
            kind = exc.kind if isinstance(exc, AgentError) else ""
            if kind == protocol.CONFLICT and conflicts + 1 < _CONFLICT_RETRIES:
                conflicts += 1
                continue
            if kind == protocol.LOCKED:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + LOCK_WAIT_S
                    _say(
                        f"{host.target}: another vpatch is working on this environment; "
                        f"waiting for its lock (up to {LOCK_WAIT_S:.0f} s)"
                    )
                if now < deadline:
                    continue
                exc = AgentError(
                    f"{exc.message}: still held after {LOCK_WAIT_S:.0f} s of waiting; "
                    "nothing was changed",
                    "another vpatch is still working here (`vpatch status` says `locked`); "
                    "run again once it is done",
                    kind,
                )
                not_done(host.patches, done, exc.message)
                raise exc from None
            not_done(host.patches, done, exc.message)
            raise


def _say(line: str) -> None:
    """A progress line for a person or a log (stderr: stdout may be the --json document;
    none under -q: patcher.output.progress)."""
    progress.say(line)


def _host_run(
    command: str, ctx: RunContext, transport: Transport, body: Callable[[HostResult], None]
) -> HostResult:
    started = time.monotonic()
    host = HostResult(target=transport.target)
    try:
        body(host)
    except VpatchError as exc:
        host.error, host.hint = exc.message, exc.hint or None
        if isinstance(exc, Unsupported):
            ctx.refused(host.target)
    host.ok = host_ok(command, host)
    host.seconds = round(time.monotonic() - started, 3)
    return host


def refuse_editable(target: str, answer: dict[str, Any], specs: Sequence[PatchSpec]) -> None:
    """An editable install's code is its source tree's files, which pip's RECORD does not
    list: vpatch would patch (or diff) bytes that are not the ones imported. Refused, naming
    the source tree, before any plan is made."""
    for spec in specs:
        source = (answer.get("packages") or {}).get(spec.package, {}).get("editable")
        if source:
            raise Unsupported(
                f"{target}: {spec.package} is an editable install (pip install -e {source}): "
                "vpatch patches installed wheels only; nothing was changed",
                f"install {spec.package} from a wheel, or change its source tree itself "
                "(it is yours: git there is the record)",
            )


# ---------------------------------------------------------------------------------------------
# Commands


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


@dataclass(frozen=True)
class _Writing:
    """What apply and rollback differ in; `_write_host` is the body they share: inspect (with
    plans made ahead), plan, commit with the checks chained, remember, re-check."""

    command: Literal["apply", "rollback"]
    specs: Sequence[PatchSpec]
    make: Callable[[HostFacts], Plan]  # the plan on some facts (a guess's, or the host's)
    decide: Callable[[HostFacts], tuple[HostFacts, Plan]]  # the plan on the host's own answer
    recheck: Callable[[HostResult, Plan, HostFacts, Ran], None]  # once written
    done: frozenset[str]  # outcomes of specs that wrote (not_done on a failure)
    guessing: bool  # plan ahead
    refusing: bool  # apply: refuse an editable install, and a plan preflight stops
    recipe: Hashable  # what `make` plans from besides the facts (exchange.commit_ahead)


def _write_host(
    w: _Writing, ctx: RunContext, transport: Transport, opts: Options, state_dir: str | None
) -> HostResult:
    def once(host: HostResult) -> None:
        request = exchange.inspect_request(ctx, w.specs, state_dir)
        if w.command == "rollback":  # a spec baked into a wheel is named, never "nothing"
            request["baked"] = True
        ahead = (
            exchange.commit_ahead(ctx, request, w.make, opts.level, w.recipe)
            if w.guessing
            else None
        )
        got = exchange.look(ctx, transport, request, host, ahead)
        if w.refusing:
            refuse_editable(transport.target, got.answer, w.specs)
        if got.guess is not None:
            facts, plan, answers = got.guess.facts, got.guess.plan, got.answers
            host.patches = plan.results
        else:
            facts, plan = w.decide(got.facts)
            host.patches = plan.results
        if w.command == "apply":  # in place, but written by a run stopped before its checks
            kept = {p.id for p in plan.results if p.outcome == "already_applied"}
            host.attention = monitor.unverified_attention(got.facts.unverified, kept)
        if got.guess is None:
            problem = preflight(facts, plan) if w.refusing and plan.writes else None
            if problem:
                raise HostError(f"{problem[0]}; nothing was changed", problem[1])
            if opts.dry_run or not plan.needs_commit():
                exchange.remember(ctx, transport, request, [got])
                return
            answers = exchange.write(ctx, transport, plan, opts.level, request)
        host.restart_required, ran, after = exchange.carry_out(
            ctx, transport, plan, opts.level, answers
        )
        exchange.remember(ctx, transport, request, [after, got])
        w.recheck(host, plan, facts, ran)

    return _host_run(
        w.command, ctx, transport, lambda host: _retrying(host, w.done, lambda: once(host))
    )


def apply(
    specs: list[PatchSpec],
    transport: Transport,
    opts: Options,
    state_dir: str | None = None,
    pristine: Pristine | None = None,
    *,
    ctx: RunContext | None = None,
) -> HostResult:
    """The host's result of applying `specs`. `pristine`: pip's bytes of a file, for --adopt's
    base and, where apply refuses a hand edit as `modified`, to name the lines that differ
    (fetched on that path only). Without `ctx`, the call is a run of its own."""
    run_ctx = ctx if ctx is not None else RunContext()

    def make(facts: HostFacts) -> Plan:
        return plan_apply(specs, facts, opts, run_ctx.caches.rewrite)

    def decide(facts: HostFacts) -> tuple[HostFacts, Plan]:
        if opts.adopt and pristine is not None:
            facts = _with_record_texts(facts, pristine)
        plan = make(facts)
        if not opts.adopt and pristine is not None and _refused_hand_edit(plan):
            plan = make(_with_record_texts(facts, pristine))  # name the lines that differ
        return facts, plan

    def recheck(host: HostResult, plan: Plan, facts: HostFacts, ran: Ran) -> None:
        undo = lambda p, failed: plan_undo(p, failed, "verify failed")  # noqa: E731
        if _recheck(run_ctx, transport, plan, opts.level, state_dir, undo, verify_failed, ran):
            host.restart_required = []  # every write was undone: disk = what they loaded

    writing = _Writing(
        "apply",
        specs,
        make,
        decide,
        recheck,
        frozenset({"applied", "would_apply"}),
        guessing=not (opts.dry_run or opts.adopt),
        refusing=True,
        recipe=("apply", _identity(specs), opts),
    )
    return _write_host(writing, run_ctx, transport, opts, state_dir)


def _identity(specs: Sequence[PatchSpec]) -> tuple[tuple[str, str], ...]:
    """The specs as a plan depends on them: each one's id and digest, in order."""
    return tuple((s.id, s.digest) for s in specs)


def _refused_hand_edit(plan: Plan) -> bool:
    return any(r.outcome == "modified" for r in plan.results)


def _recheck(
    ctx: RunContext,
    transport: Transport,
    plan: Plan,
    level: Level,
    state_dir: str | None,
    undo: Callable[[Plan, set[str]], Plan],
    say: Callable[[set[str], ProbeResult | None], str],
    ran: Ran,
) -> bool:
    """Each spec's checks on what was just written (`ran`: those that rode in the commit's
    chain; the rest run now); if any fails, commit `undo`'s plan (the previous bytes back) and
    put `say`'s words on every spec it touched. True when every write was undone."""
    failed: dict[str, ProbeResult] = {}
    ids = {r.id for r in plan.results}
    chained = exchange.chained_checks(plan, level)
    for sid in plan.checks:
        got = ran[sid] if sid in ran else run_checks(ctx, transport, chained.get(sid, []))
        if sid in ids:
            plan.result(sid).probes = got
        bad = next((p for p in got if not p.ok), None)
        if bad is not None:
            failed[sid] = bad
    if not failed:
        return False
    back = undo(plan, set(failed))
    exchange.commit(ctx, transport, back, state_dir)
    return undone(plan, back, failed, say)


def verify(
    specs: list[PatchSpec],
    transport: Transport,
    opts: Options,
    state_dir: str | None = None,
    ids: Sequence[str] = (),
    pristine: Pristine | None = None,
    *,
    ctx: RunContext | None = None,
) -> HostResult:
    """The host's verdict on specs by their files and edits; `ids` (no spec file at hand) by
    the journal alone. With `pristine`, a file edited by hand (`modified`) is compared with
    pip's bytes so the result names the lines that differ. Without `ctx`, a run of its own."""
    run_ctx = ctx if ctx is not None else RunContext()
    rewrite = run_ctx.caches.rewrite

    def checks_of(facts: HostFacts) -> list[list[dict[str, Any]]]:
        """Every check list the body below runs for these facts, in its order."""
        out = []
        for spec in specs:
            res, variant = verify_spec(spec, facts, rewrite)
            if wants_probes(res):
                out.append(checks_for(spec, variant, opts.level))
        for sid in ids:
            res, checks = verify_recorded(sid, facts, opts.level)
            if res.outcome == "applied":
                out.append(checks)
        return [c for c in out if c]

    def ahead(fp: str, guessed: HostFacts) -> Guess | None:
        chain = [{"op": "verify", "checks": c} for c in checks_of(guessed)]
        return Guess(fp, guessed, Plan([]), chain) if chain else None

    def body(host: HostResult) -> None:
        request = exchange.inspect_request(run_ctx, specs, state_dir, procs=True)
        got = exchange.look(run_ctx, transport, request, host, ahead)
        exchange.remember(run_ctx, transport, request, [got])
        refuse_editable(transport.target, got.answer, specs)
        facts = got.facts
        ran = list(zip(got.guess.chain, got.answers or [], strict=False)) if got.guess else []

        def results_of(checks: list[dict[str, Any]]) -> list[ProbeResult]:
            """The checks' results: from the inspect's exchange when they rode in it."""
            if checks and ran and ran[0][0]["checks"] == checks:
                return probes(checked(transport.target, ran.pop(0)[1]))
            return run_checks(run_ctx, transport, checks)

        host.restart_required = facts.restart_required
        scraped = None
        if opts.metrics_url:
            from patcher.serving import metrics  # `verify --metrics` only

            scraped = metrics.scrape(transport, opts.metrics_url, window=opts.metrics_window)
        for spec in specs:
            res, variant = verify_spec(spec, facts, rewrite)
            if res.outcome == "modified" and pristine is not None:
                res, variant = verify_spec(spec, _with_record_texts(facts, pristine), rewrite)
            host.patches.append(res)
            if wants_probes(res):
                res.probes = results_of(checks_for(spec, variant, opts.level))
                _record_verified(run_ctx, transport, facts, res, state_dir)
            if scraped is not None:
                loaded = judge_probes(res, dry=True)
                stale = len(host.restart_required)
                res.probes.append(
                    metrics.probe(scraped, spec.metrics, opts.min_acceptance, loaded, stale)
                )
            judge_probes(res)
        for sid in ids:
            res, checks = verify_recorded(sid, facts, opts.level)
            host.patches.append(res)
            if res.outcome == "applied":
                res.probes = results_of(checks)
                _record_verified(run_ctx, transport, facts, res, state_dir)
            judge_probes(res)

    return _host_run("verify", run_ctx, transport, body)


def _record_verified(
    ctx: RunContext, transport: Transport, facts: HostFacts, res: PatchResult, state_dir: str | None
) -> None:
    """A write whose checks never finished (protocol.VERIFIED), its checks passed now: said in
    the journal, so bare `status` no longer reports it (one exchange, only in that case)."""
    if res.outcome != "applied" or not res.probes or not all(p.ok for p in res.probes):
        return
    for sid, txn in facts.unverified:
        if sid == res.id:
            record = {"txn": txn, "spec": sid, "state_dir": state_dir}
            exchange.call(transport, {"op": "verify", "checks": [], "record": record}, ctx)


def rollback(
    specs: list[PatchSpec] | None,
    transport: Transport,
    opts: Options,
    state_dir: str | None = None,
    ids: Sequence[str] = (),
    *,
    ctx: RunContext | None = None,
) -> HostResult:
    """The host's result of undoing specs (all vpatch did, when `specs` is None and no `ids`),
    keeping the others: the files are rebuilt from the journal, and the kept specs' recorded
    checks run again; if one fails, the previous bytes go back and the error names the spec
    that needs the other. Without `ctx`, the call is a run of its own."""
    run_ctx = ctx if ctx is not None else RunContext()
    wanted = None if specs is None and not ids else {s.id for s in specs or []} | set(ids)

    def make(facts: HostFacts) -> Plan:
        return plan_rollback(wanted, facts, opts, specs or [])

    def recheck(host: HostResult, plan: Plan, facts: HostFacts, ran: Ran) -> None:
        _rollback_recheck(run_ctx, transport, plan, facts, opts.level, state_dir, ran)

    writing = _Writing(
        "rollback",
        specs or [],
        make,
        lambda facts: (facts, make(facts)),
        recheck,
        frozenset({"rolled_back"}),
        guessing=not opts.dry_run,
        refusing=False,
        recipe=(
            "rollback",
            None if wanted is None else tuple(sorted(wanted)),
            _identity(specs or []),
            opts,
        ),
    )
    return _write_host(writing, run_ctx, transport, opts, state_dir)


def _rollback_recheck(
    ctx: RunContext,
    transport: Transport,
    plan: Plan,
    facts: HostFacts,
    level: Level,
    state_dir: str | None,
    ran: Ran,
) -> None:
    """The kept specs' checks after a partial rollback. One that fails is judged against the
    bytes from before (plan_redo puts them back): failing there too, it says nothing about the
    specs taken out ("could not check here"), and the rollback is committed again; passing
    there, the kept spec needs them, and the previous bytes stay (still_needed)."""
    chained = exchange.chained_checks(plan, level)
    failed: dict[str, ProbeResult] = {}
    for sid in plan.checks:
        got = ran[sid] if sid in ran else run_checks(ctx, transport, chained.get(sid, []))
        bad = next((p for p in got if not p.ok), None)
        if bad is not None:
            failed[sid] = bad
    if not failed:
        return
    back = plan_redo(plan, facts)
    exchange.commit(ctx, transport, back, state_dir)
    needs: dict[str, ProbeResult] = {}
    for sid, bad in failed.items():
        again = run_checks(ctx, transport, [c for c in chained[sid] if c.get("name") == bad.name])
        if all(p.ok for p in again):
            needs[sid] = bad
    if needs:
        undone(plan, back, needs, still_needed)
        return
    exchange.commit(ctx, transport, plan, state_dir)
    could_not_check(plan, failed)


def status(
    specs: list[PatchSpec],
    transport: Transport,
    opts: Options,
    state_dir: str | None = None,
    *,
    ctx: RunContext | None = None,
) -> HostResult:
    """With specs: their static verify. Without: everything the journal says vpatch applied."""
    run_ctx = ctx if ctx is not None else RunContext()
    if specs:
        host = verify(specs, transport, Options(level="static"), state_dir, ctx=run_ctx)
        host.ok = host_ok("status", host)
        return host

    def body(host: HostResult) -> None:
        # procs_for None: who runs code older than ANY journaled file (apply's scan, for all)
        request = dict(exchange.inspect_request(run_ctx, [], state_dir), procs_for=None)
        request["baked"] = True  # and the specs baked into installed wheels (vpatch.json)
        got = exchange.look(run_ctx, transport, request, host)
        exchange.remember(run_ctx, transport, request, [got])
        baked = monitor.baked_results(got.answer.get("baked", []))
        host.patches = status_journal(got.facts) + baked
        host.restart_required = got.facts.restart_required
        from patcher.rollout import (
            resume as rolloutresume,  # where the last `vpatch rollout` got to on this host
        )

        host.rollout_step, bad = rolloutresume.last_step(got.answer.get("rollout"))
        host.warnings += bad
        # what needs a person: exit 1 (monitor.py)
        host.attention = monitor.attention(host, got.facts.unverified)

    return _host_run("status", run_ctx, transport, body)


def connect_error(target: str, exc: HostError) -> HostResult:
    """The result of a host that could not be reached."""
    return HostResult(target=target, ok=False, error=exc.message, hint=exc.hint or None)
