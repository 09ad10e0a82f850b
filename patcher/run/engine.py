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
from dataclasses import replace
from typing import Any, ClassVar, Literal

from patcher.agent import protocol
from patcher.errors import AgentError, HostError, Unreachable, Unsupported, VpatchError
from patcher.output import progress
from patcher.plan import monitor
from patcher.plan.apply import plan_apply
from patcher.plan.base import Level, Options, Plan, checks_for
from patcher.plan.hostfacts import HostFacts
from patcher.plan.preflight import preflight
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
from patcher.run.exchange import Guess, RunContext, checked, probes, run_checks
from patcher.specs.model import PatchSpec
from patcher.transports import Transport

Pristine = Callable[[str, str, str], str | None]  # (package, version, file) -> pip's text
Ran = dict[str, list[ProbeResult]]  # spec id -> the results of its checks in a commit's chain
_CONFLICT_RETRIES = 3


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
        host.state = monitor.UNREACHABLE if isinstance(exc, Unreachable) else None
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


class _Writing:
    """A command that writes (apply, rollback) on one host. `run` is the body they share:
    inspect (with plans made ahead), plan, commit with the checks chained, remember, re-check;
    the methods it calls are what they differ in, and each subclass overrides its own."""

    command: ClassVar[Literal["apply", "rollback"]]
    done: ClassVar[frozenset[str]]  # outcomes of specs that wrote (not_done on a failure)

    def __init__(
        self,
        specs: Sequence[PatchSpec],
        transport: Transport,
        opts: Options,
        state_dir: str | None,
        ctx: RunContext | None,
    ) -> None:
        self.specs = specs
        self.transport = transport
        self.opts = opts
        self.state_dir = state_dir
        self.ctx = ctx if ctx is not None else RunContext()  # None: a run of its own

    def make(self, facts: HostFacts) -> Plan:
        """The plan on some facts (a guess's, or the host's)."""
        raise NotImplementedError

    def decide(self, facts: HostFacts) -> tuple[HostFacts, Plan]:
        """The plan on the host's own answer, and the facts it was made on."""
        return facts, self.make(facts)

    def recheck(self, host: HostResult, plan: Plan, facts: HostFacts, ran: Ran) -> None:
        """The checks once `plan` is written (`ran`: those that rode in the commit's chain)."""
        raise NotImplementedError

    def recipe(self) -> Hashable:
        """What `make` plans from besides the facts (exchange.commit_ahead's key)."""
        raise NotImplementedError

    def guessing(self) -> bool:
        """Whether to plan ahead (a dry run writes nothing, so there is nothing to chain)."""
        return not self.opts.dry_run

    def request(self) -> dict[str, Any]:
        """The inspect request."""
        return exchange.inspect_request(self.ctx, self.specs, self.state_dir)

    def check_answer(self, answer: dict[str, Any]) -> None:
        """Refuse what the inspect's answer shows before any plan (HostError); nothing here."""

    def check_plan(self, facts: HostFacts, plan: Plan) -> tuple[str, str] | None:
        """Why the plan must not be committed (message, hint), made on the host's own answer;
        None here."""
        return None

    def attend(self, host: HostResult, plan: Plan, got: exchange.Exchange) -> None:
        """What needs a person, once the plan is known; nothing here."""

    def run(self) -> HostResult:
        """The host's result."""
        return _host_run(
            self.command,
            self.ctx,
            self.transport,
            lambda host: _retrying(host, self.done, lambda: self._once(host)),
        )

    def _once(self, host: HostResult) -> None:
        ctx, transport, level = self.ctx, self.transport, self.opts.level
        request = self.request()
        if self.opts.dry_run:  # it only looks: nothing is asked after the inspect
            request = exchange.last_if_ending(ctx, request)
        ahead = (
            exchange.commit_ahead(ctx, request, self.make, level, self.recipe())
            if self.guessing()
            else None
        )
        got = exchange.look(ctx, transport, request, host, ahead)
        self.check_answer(got.answer)
        if got.guess is not None:
            facts, plan, answers = got.guess.facts, got.guess.plan, got.answers
            host.patches = plan.results
        else:
            facts, plan = self.decide(got.facts)
            host.patches = plan.results
        self.attend(host, plan, got)
        if got.guess is None:
            problem = self.check_plan(facts, plan)
            if problem:
                raise HostError(f"{problem[0]}; nothing was changed", problem[1])
            if self.opts.dry_run or not plan.needs_commit():
                exchange.remember(ctx, transport, request, [got])
                return
            answers = exchange.write(ctx, transport, plan, level, request)
        host.restart_required, ran, after = exchange.carry_out(ctx, transport, plan, level, answers)
        exchange.remember(ctx, transport, request, [after, got])
        self.recheck(host, plan, facts, ran)


class _Applying(_Writing):
    """apply on one host: refuses an editable install and what the planner's preflight stops;
    a failed check puts the previous bytes back."""

    command = "apply"
    done = frozenset({"applied", "would_apply"})

    def __init__(
        self,
        specs: Sequence[PatchSpec],
        transport: Transport,
        opts: Options,
        state_dir: str | None,
        ctx: RunContext | None,
        pristine: Pristine | None,
    ) -> None:
        super().__init__(specs, transport, opts, state_dir, ctx)
        self.pristine = pristine

    def make(self, facts: HostFacts) -> Plan:
        return plan_apply(self.specs, facts, self.opts, self.ctx.caches.rewrite)

    def decide(self, facts: HostFacts) -> tuple[HostFacts, Plan]:
        adopt, pristine = self.opts.adopt, self.pristine
        if adopt and pristine is not None:
            facts = _with_record_texts(facts, pristine)
        plan = self.make(facts)
        if not adopt and pristine is not None and _refused_hand_edit(plan):
            plan = self.make(_with_record_texts(facts, pristine))  # name the lines that differ
        return facts, plan

    def recheck(self, host: HostResult, plan: Plan, facts: HostFacts, ran: Ran) -> None:
        undo = lambda p, failed: plan_undo(p, failed, "verify failed")  # noqa: E731
        ctx, transport, level = self.ctx, self.transport, self.opts.level
        if _recheck(ctx, transport, plan, level, self.state_dir, undo, verify_failed, ran):
            host.restart_required = []  # every write was undone: disk = what they loaded

    def recipe(self) -> Hashable:
        return ("apply", _identity(self.specs), self.opts)

    def guessing(self) -> bool:
        return not (self.opts.dry_run or self.opts.adopt)

    def check_answer(self, answer: dict[str, Any]) -> None:
        refuse_editable(self.transport.target, answer, self.specs)

    def check_plan(self, facts: HostFacts, plan: Plan) -> tuple[str, str] | None:
        return preflight(facts, plan) if plan.writes else None

    def attend(self, host: HostResult, plan: Plan, got: exchange.Exchange) -> None:
        # in place, but written by a run stopped before its checks
        kept = {p.id for p in plan.results if p.outcome == "already_applied"}
        host.attention = monitor.unverified_attention(got.facts.unverified, kept)


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
    return _Applying(specs, transport, opts, state_dir, ctx, pristine).run()


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
        chain: list[dict[str, Any]] = [{"op": "verify", "checks": c} for c in checks_of(guessed)]
        if chain and not opts.metrics_url and not guessed.unverified:
            chain[-1] = exchange.last_if_ending(run_ctx, chain[-1])  # nothing asked after it
        return Guess(fp, guessed, Plan([]), chain) if chain else None

    def body(host: HostResult) -> None:
        request = exchange.inspect_request(run_ctx, specs, state_dir, procs=True)
        if opts.level == "static" and not opts.metrics_url:  # no check, no scrape follows
            request = exchange.last_if_ending(run_ctx, request)
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

            scraped = metrics.scrape_as(
                opts.metrics_profile, transport, opts.metrics_url, opts.metrics_window
            )
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


class _RollingBack(_Writing):
    """rollback on one host: the files rebuilt from the journal, the kept specs' checks re-run
    (patcher.plan.undo decides what a failure means)."""

    command = "rollback"
    done = frozenset({"rolled_back"})

    def __init__(
        self,
        specs: list[PatchSpec] | None,
        transport: Transport,
        opts: Options,
        state_dir: str | None,
        ctx: RunContext | None,
        ids: Sequence[str],
    ) -> None:
        super().__init__(specs or [], transport, opts, state_dir, ctx)
        self.wanted = None if specs is None and not ids else {s.id for s in specs or []} | set(ids)

    def make(self, facts: HostFacts) -> Plan:
        return plan_rollback(self.wanted, facts, self.opts, self.specs)

    def recheck(self, host: HostResult, plan: Plan, facts: HostFacts, ran: Ran) -> None:
        ctx, transport, level = self.ctx, self.transport, self.opts.level
        _rollback_recheck(ctx, transport, plan, facts, level, self.state_dir, ran)

    def recipe(self) -> Hashable:
        wanted = None if self.wanted is None else tuple(sorted(self.wanted))
        return ("rollback", wanted, _identity(self.specs), self.opts)

    def request(self) -> dict[str, Any]:
        request = super().request()
        request["baked"] = True  # a spec baked into a wheel is named, never "nothing"
        return request


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
    return _RollingBack(specs, transport, opts, state_dir, ctx, ids).run()


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
        request = exchange.last_if_ending(run_ctx, request)  # nothing is asked after it
        got = exchange.look(run_ctx, transport, request, host)
        exchange.remember(run_ctx, transport, request, [got])
        baked = monitor.baked_results(got.answer.get("baked", []))
        host.patches = status_journal(got.facts) + baked
        host.restart_required = got.facts.restart_required
        # where the last `vpatch rollout` got to on this host
        from patcher.rollout.resume import kept_now, last_step

        host.rollout_step, bad = last_step(got.answer.get("rollout"))
        applied = [p.id for p in host.patches if p.outcome == "applied"]
        host.rollout_step = kept_now(host.rollout_step, applied)
        host.warnings += bad
        # what needs a person: exit 1 (monitor.py)
        host.attention = monitor.attention(host, got.facts.unverified)

    return _host_run("status", run_ctx, transport, body)


def connect_error(target: str, exc: HostError) -> HostResult:
    """The result of a host that could not be reached (or whose session could not start)."""
    state = monitor.UNREACHABLE if isinstance(exc, Unreachable) else None
    return HostResult(target, False, exc.message, exc.hint or None, state=state)
