"""Per host: inspect -> plan -> commit -> verify -> record. An executor, nothing more.

Every decision (variant, outcome, bytes to write, journal entries, what to undo) is made by the
pure planner, `patcher.plan`; this module carries the host's facts to it and the plan's writes
back to the agent, in one agent session per host. The one costly step, a libcst rewrite, is
cached for the run (`rewrite_cache.Caches`): 32 hosts with the same file cost one parse.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from patcher import factcache, rewrite_cache
from patcher.agent import protocol
from patcher.errors import AgentError, HostError, Unsupported, VpatchError
from patcher.hostfacts import HostFacts
from patcher.plan import (
    Level,
    Options,
    Plan,
    checks_for,
    could_not_check,
    drift_state,
    judge_probes,
    not_done,
    plan_apply,
    plan_redo,
    plan_rollback,
    plan_undo,
    preflight,
    read_only_hint,
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
from patcher.transports import Transport

__all__ = ["Level", "Options", "drift_state", "sha256_text", "unified_diff"]

_CONFLICT_RETRIES = 3
# TEST-ONLY: a fault point spec (patcher/agent/faults.py) sent with every commit request, so the
# crash tests reach agents over SSH too. Deliberately not a CLI flag; unset, nothing changes.
TEST_FAULT_ENV = "VPATCH_TEST_FAULT"


CACHES = rewrite_cache.Caches()  # one run = one process; the CLI reads its stats for --json
REWRITE_STATS = CACHES.stats
# Agent exchanges (round trips) of this run, and hosts whose commit rode in its inspect's
# exchange (a guess that matched): the CLI reports both under --json's stats.
EXCHANGE_STATS = {"agent_exchanges": 0, "planned_ahead": 0}
_STATS_LOCK = threading.Lock()


def _count(name: str) -> None:
    with _STATS_LOCK:
        EXCHANGE_STATS[name] += 1


def _call(transport: Transport, request: dict[str, Any]) -> dict[str, Any]:
    _count("agent_exchanges")
    return _ok(transport.target, transport.call(request))


def _ok(target: str, res: dict[str, Any]) -> dict[str, Any]:
    if not res.get("ok"):
        kind = str(res.get("kind", ""))
        error = str(res.get("error"))
        hint = read_only_hint(error) or protocol.HINTS.get(kind, "")
        raise AgentError(f"{target}: {error}", hint, kind)
    return res


def _inspect_request(
    specs: Sequence[PatchSpec], state_dir: str | None, procs: bool = False
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "op": "inspect",
        "packages": wanted_files(specs),
        "state_dir": state_dir,
        "known": sorted(CACHES.content),
    }
    if procs:
        request["procs_for"] = [s.id for s in specs]
    return request


@dataclass
class Guess:
    """A plan made ahead on an answer the host gave before, and the requests that carry it
    out, sent with the inspect: they run in the same exchange when the host's answer has the
    same fingerprint (patcher/agent/chain.py)."""

    fingerprint: str  # of the answer it was made on (agent/protocol.py)
    facts: HostFacts
    plan: Plan  # a verify's guess writes nothing: an empty plan, its chain the checks
    chain: list[dict[str, Any]]


@dataclass
class Exchange:
    """What an inspect brought back: the facts, and the guess the agent carried out, if any,
    with the answers of its chain."""

    facts: HostFacts
    answer: dict[str, Any]
    guess: Guess | None = None
    answers: list[dict[str, Any]] | None = None


def _inspect(
    transport: Transport,
    request: dict[str, Any],
    host: HostResult,
    guesses: Sequence[Guess] = (),
) -> Exchange:
    """ONE agent call for every fact about the host (with `procs_for`, the restart-required
    scan rides along; with guesses, the commit too). A transaction a crash left half-written
    is repaired first, then looked at again: no decision is ever made on a half-patched host.
    The answer is offered to the hosts after this one as a guess (_seen)."""
    table = {g.fingerprint: g for g in guesses}
    for _ in range(2):
        sent = dict(request, then_if={fp: g.chain for fp, g in table.items()}) if table else request
        res = _call(transport, sent)
        _fill_texts(transport.target, res)
        if not res.get("incomplete"):
            break
        table = {}
        done = _call(transport, {"op": "repair", "state_dir": request.get("state_dir")})
        host.notes.extend(done.get("notes", []))
    facts = HostFacts.from_answer(res)
    host.python, host.warnings = facts.python, facts.warnings
    host.uid, host.dropped_from = res.get("uid"), res.get("dropped_from")
    guess = table.get(str(res.get("fingerprint"))) if "then" in res else None
    if guess is not None:
        _count("planned_ahead")
    _seen(request, res)
    return Exchange(facts, res, guess, res.get("then") if guess else None)


def _remember(
    transport: Transport, request: dict[str, Any], answers: Sequence[dict[str, Any] | None]
) -> None:
    """Keep a host's answers, newest first, for the next run's guesses (patcher.factcache):
    the inspect's and, after a commit, its chain's closing inspect (the state the next
    command will meet). Once per host and command: a cache write is the costliest step a
    controller takes per host."""
    got = [a for a in answers if a is not None and "packages" in a and "journal" in a]
    if got:
        factcache.remember(factcache.key(transport.target, request), got)
    if got and request.get("packages"):
        # `rollback ID`, `status` and `verify ID` ask for no package files: the same answers
        # but for those are what they will meet. If this narrowing ever misses the agent's
        # answer, its fingerprint differs and that run takes the two-step path.
        bare = dict(request, packages={})
        narrowed = [dict(a, packages={}) for a in got]
        factcache.remember(factcache.key(transport.target, bare), narrowed)


def _guesses(
    transport: Transport,
    request: dict[str, Any],
    make: Callable[[HostFacts], Plan],
    level: Level,
) -> list[Guess]:
    """One plan per answer this host gave before (patcher.factcache), or another host gave in
    this run (a fleet's hosts tend to be alike), that would commit."""
    out: list[Guess] = []
    for fp, answer in _guessed_answers(transport, request):
        facts = HostFacts.from_answer(answer)
        plan = make(facts)
        if not plan.needs_commit() or preflight(facts, plan):
            continue
        out.append(Guess(fp, facts, plan, _chain(plan, level, request)))
    return out


def _guessed_answers(
    transport: Transport, request: dict[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    """(fingerprint, answer): what this host answered before (patcher.factcache), then what
    the hosts before it answered in this run; distinct, at most _MAX_GUESSES. Their texts
    (each checked against its sha256) join the run's content cache."""
    out: list[tuple[str, dict[str, Any]]] = []
    for fp, answer in factcache.load(factcache.key(transport.target, request)) + _peers(request):
        if len(out) == _MAX_GUESSES or any(fp == f for f, _ in out):
            continue
        try:
            for text_sha, text in _texts_of(answer):
                CACHES.content.setdefault(text_sha, text)
        except ValueError:
            continue  # a text that is not its hash's bytes: no guess (rewrite_cache.Texts)
        out.append((fp, answer))
    return out


_MAX_GUESSES = 3
# factcache.key("", request) -> (fingerprint, answer), newest first
_PEERS: dict[str, list[tuple[str, dict[str, Any]]]] = {}


def _peers(request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    with _STATS_LOCK:
        return list(_PEERS.get(factcache.key("", request), []))


def _seen(request: dict[str, Any], answer: dict[str, Any]) -> None:
    """Offer a host's answer to the hosts after it in this run (two per request, newest)."""
    fp = factcache.usable(answer)
    if fp is None:
        return
    got = {k: v for k, v in answer.items() if k != "then"}
    with _STATS_LOCK:
        have = _PEERS.setdefault(factcache.key("", request), [])
        if all(f != fp for f, _ in have):
            have.insert(0, (fp, got))
            del have[2:]


def _fill_texts(target: str, res: dict[str, Any]) -> None:
    """Every text the host sent is hashed here, on arrival, before anything caches, compares
    or rewrites it: one that is not the bytes of the sha256 it comes with fails this host
    (a host cannot put its text under another file's hash, so no later host is given it);
    texts the host left out because the controller has them are put back."""
    for name, pkg in res.get("packages", {}).items():
        for rel, info in pkg.get("files", {}).items():
            sha = info.get("sha256")
            if info.get("text") is not None and sha:
                _keep(target, f"{name}/{rel}", sha, info["text"])
            elif info.pop("cached", False) and sha in CACHES.content:
                info["text"] = CACHES.content[sha]
            elif info.get("text") is not None:
                raise _forged(target, f"{name}/{rel}")
    for path, st in res.get("journal", {}).items():
        text = st.get("current_text")
        if text is not None and st.get("current"):
            _keep(target, str(path), st["current"], text)
        elif text is not None:
            raise _forged(target, str(path))
        elif st.get("current") in CACHES.content:
            st["current_text"] = CACHES.content[st["current"]]
        if st.get("base_text") is not None:
            _keep(target, f"{path} (its backup)", st.get("base"), st["base_text"])


def _keep(target: str, where: str, sha: Any, text: Any) -> None:
    try:
        CACHES.content[sha] = text
    except (TypeError, ValueError):
        raise _forged(target, where) from None


def _forged(target: str, where: str) -> AgentError:
    return AgentError(
        f"{target}: the host sent a text for {where} that is not the bytes of the sha256 it"
        " claims; nothing was changed on this host",
        "something on the host rewrites the agent's answers (a wrapper interpreter, a .pth"
        " file, the transport): check the host; the other hosts are not affected",
        "protocol",
    )


def _texts_of(answer: dict[str, Any]) -> list[tuple[str, str]]:
    """(sha256, text) of every file text in an answer factcache checked."""
    return [
        (info["sha256"], info["text"])
        for pkg in answer["packages"].values()
        for info in pkg["files"].values()
        if isinstance(info.get("text"), str) and info.get("sha256")
    ]


def _commit_request(
    plan: Plan, state_dir: str | None, lock_timeout: float | None = None
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "op": "commit",
        "writes": [w.request() for w in plan.writes],
        "journal": plan.entries,
        "state_dir": state_dir,
        "gc": plan.gc,
    }
    if lock_timeout is not None:
        request["lock_timeout"] = lock_timeout
    if plan.backups:  # apply --adopt: pip's bytes become the backup the journal's base names
        request["backups"] = plan.backups
    if plan.checks and any(e.get("action") == "rollback" for e in plan.entries):
        # A partial rollback whose remaining specs' checks run next may put these bytes back:
        # the backups this commit's entries name stay until a later commit retires them.
        request["keep_backups"] = True
    fault = os.environ.get(TEST_FAULT_ENV)
    if fault:  # TEST-ONLY (patcher/agent/faults.py): crash the agent at a named commit step
        request["fault"] = fault
    return request


def _commit(transport: Transport, plan: Plan, state_dir: str | None) -> dict[str, Any]:
    return _call(transport, _commit_request(plan, state_dir))


def _chained_checks(plan: Plan, level: Level) -> dict[str, list[dict[str, Any]]]:
    """spec id -> the checks that ride in a commit's chain (none at --level static)."""
    if level == "static":
        return {}
    return {sid: checks for sid, checks in plan.checks.items() if checks}


def _closing_inspect(request: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """The inspect that ends a commit's chain: what the host looks like once `plan` is
    written, for the next command's guess. Texts the controller holds stay at home."""
    for w in plan.writes:
        if w.text is not None and w.after:
            CACHES.content[w.after] = w.text
    return dict(request, known=sorted(CACHES.content))


def _chain(plan: Plan, level: Level, request: dict[str, Any]) -> list[dict[str, Any]]:
    """A commit, the checks of what it wrote, and the closing inspect: one exchange."""
    chain = [_commit_request(plan, request.get("state_dir"), LOCK_POLL_S)]
    chain += [{"op": "verify", "checks": c} for c in _chained_checks(plan, level).values()]
    chain.append(_closing_inspect(request, plan))
    return chain


def _commit_chained(
    transport: Transport, plan: Plan, level: Level, request: dict[str, Any]
) -> list[dict[str, Any]]:
    """The two-step path's second exchange: the chain as `then` of its commit."""
    first, *rest = _chain(plan, level, request)
    res = _call(transport, dict(first, then=rest))
    return [res, *res.pop("then", [])]


def _carry_out(
    transport: Transport, plan: Plan, level: Level, answers: Any
) -> tuple[list[dict[str, Any]], dict[str, list[ProbeResult]], dict[str, Any] | None]:
    """What a chain's answers say: the commit's restart list, per spec its checks, and the
    closing inspect's answer when every check passed (else the host will not stay so). An
    error answer raises as a call would."""
    if not isinstance(answers, list) or not answers:
        raise AgentError(f"{transport.target}: the agent's chain came back empty", "", "protocol")
    commit = _ok(transport.target, answers[0])
    ran: dict[str, list[ProbeResult]] = {}
    for sid, got in zip(_chained_checks(plan, level), answers[1:], strict=False):
        ran[sid] = _probes(_ok(transport.target, got))
    last: dict[str, Any] | None = answers[-1]
    passed = all(p.ok for probes in ran.values() for p in probes)
    if passed and len(ran) == len(_chained_checks(plan, level)) and last and last.get("ok"):
        _fill_texts(transport.target, last)
    else:
        last = None
    return list(commit.get("restart_required", [])), ran, last


# A commit asks for the environment's lock for LOCK_POLL_S; held by another vpatch, the run
# says once on stderr that it waits, plans again from a fresh inspect (what the other run wrote
# counts) and asks again, for at most LOCK_WAIT_S in all. Then it fails, saying who holds what.
LOCK_POLL_S = 1.0
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
    """A progress line for a person or a log (stderr: stdout may be the --json document)."""
    print(line, file=sys.stderr, flush=True)


def _run_checks(transport: Transport, checks: list[dict[str, Any]]) -> list[ProbeResult]:
    if not checks:
        return []
    return _probes(_call(transport, {"op": "verify", "checks": checks}))


def _probes(res: dict[str, Any]) -> list[ProbeResult]:
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
        if isinstance(exc, Unsupported):
            with _STATS_LOCK:
                UNSUPPORTED.add(host.target)
    host.ok = host_ok(command, host)
    host.seconds = round(time.monotonic() - started, 3)
    return host


# Targets refused as unpatchable in this run (errors.Unsupported): the CLI exits 2 for them.
UNSUPPORTED: set[str] = set()


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
    """`pristine`: pip's bytes of a file, for --adopt's base and, where apply refuses a hand
    edit as `modified`, to name the lines that differ (fetched on that path only)."""

    def make(facts: HostFacts) -> Plan:
        return plan_apply(specs, facts, opts, CACHES.rewrite)

    def once(host: HostResult) -> None:
        request = _inspect_request(specs, state_dir)
        guessing = not (opts.dry_run or opts.adopt)
        guesses = _guesses(transport, request, make, opts.level) if guessing else []
        got = _inspect(transport, dict(request, known=sorted(CACHES.content)), host, guesses)
        refuse_editable(transport.target, got.answer, specs)
        if got.guess is not None:
            plan = got.guess.plan
            host.patches = plan.results
            answers = got.answers
        else:
            facts = got.facts
            if opts.adopt and pristine is not None:
                facts = _with_record_texts(facts, pristine)
            plan = make(facts)
            if not opts.adopt and pristine is not None and _refused_hand_edit(plan):
                plan = make(_with_record_texts(facts, pristine))  # name the lines that differ
            host.patches = plan.results
            problem = preflight(facts, plan) if plan.writes else None
            if problem:
                raise HostError(f"{problem[0]}; nothing was changed", problem[1])
            if opts.dry_run or not plan.needs_commit():
                _remember(transport, request, [got.answer])
                return
            answers = _commit_chained(transport, plan, opts.level, request)
        host.restart_required, ran, after = _carry_out(transport, plan, opts.level, answers)
        _remember(transport, request, [after, got.answer])
        undo = lambda p, failed: plan_undo(p, failed, "verify failed")  # noqa: E731
        if _recheck(transport, plan, opts.level, state_dir, undo, verify_failed, ran):
            host.restart_required = []  # every write was undone: disk = what they loaded

    done = frozenset({"applied", "would_apply"})
    return _host_run("apply", transport, lambda host: _retrying(host, done, lambda: once(host)))


def _refused_hand_edit(plan: Plan) -> bool:
    return any(r.outcome == "modified" for r in plan.results)


def _recheck(
    transport: Transport,
    plan: Plan,
    level: Level,
    state_dir: str | None,
    undo: Callable[[Plan, set[str]], Plan],
    say: Callable[[set[str], ProbeResult | None], str],
    ran: dict[str, list[ProbeResult]],
) -> bool:
    """Each spec's checks on what was just written (`ran`: those that rode in the commit's
    chain; the rest run now); if any fails, commit `undo`'s plan (the previous bytes back) and
    put `say`'s words on every spec it touched. True when every write was undone."""
    failed: dict[str, ProbeResult] = {}
    ids = {r.id for r in plan.results}
    chained = _chained_checks(plan, level)
    for sid in plan.checks:
        got = ran[sid] if sid in ran else _run_checks(transport, chained.get(sid, []))
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
    pristine: Pristine | None = None,
) -> HostResult:
    """Specs by their files and edits; `ids` (no spec file at hand) by the journal alone.
    With `pristine`, a file edited by hand (`modified`) is compared with pip's bytes so the
    result names the lines that differ."""

    def checks_of(facts: HostFacts) -> list[list[dict[str, Any]]]:
        """Every check list the body below runs for these facts, in its order."""
        out = []
        for spec in specs:
            res, variant = verify_spec(spec, facts, CACHES.rewrite)
            if wants_probes(res):
                out.append(checks_for(spec, variant, opts.level))
        for sid in ids:
            res, checks = verify_recorded(sid, facts, opts.level)
            if res.outcome == "applied":
                out.append(checks)
        return [c for c in out if c]

    def body(host: HostResult) -> None:
        request = _inspect_request(specs, state_dir, procs=True)
        guesses = []
        for fp, answer in _guessed_answers(transport, request):
            guessed = HostFacts.from_answer(answer)
            chain = [{"op": "verify", "checks": c} for c in checks_of(guessed)]
            if chain:
                guesses.append(Guess(fp, guessed, Plan([]), chain))
        got = _inspect(transport, dict(request, known=sorted(CACHES.content)), host, guesses)
        _remember(transport, request, [got.answer])
        refuse_editable(transport.target, got.answer, specs)
        facts = got.facts
        ran = list(zip(got.guess.chain, got.answers or [], strict=False)) if got.guess else []

        def run(checks: list[dict[str, Any]]) -> list[ProbeResult]:
            """The checks' results: from the inspect's exchange when they rode in it."""
            if checks and ran and ran[0][0]["checks"] == checks:
                return _probes(_ok(transport.target, ran.pop(0)[1]))
            return _run_checks(transport, checks)

        host.restart_required = facts.restart_required
        scraped = None
        if opts.metrics_url:
            from patcher import metrics  # `verify --metrics` only

            scraped = metrics.scrape(transport, opts.metrics_url, window=opts.metrics_window)
        for spec in specs:
            res, variant = verify_spec(spec, facts, CACHES.rewrite)
            if res.outcome == "modified" and pristine is not None:
                res, variant = verify_spec(
                    spec, _with_record_texts(facts, pristine), CACHES.rewrite
                )
            host.patches.append(res)
            if wants_probes(res):
                res.probes = run(checks_for(spec, variant, opts.level))
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
                res.probes = run(checks)
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

    def make(facts: HostFacts) -> Plan:
        return plan_rollback(wanted, facts, opts, specs or [])

    def once(host: HostResult) -> None:
        request = _inspect_request(specs or [], state_dir)
        guesses = [] if opts.dry_run else _guesses(transport, request, make, opts.level)
        got = _inspect(transport, dict(request, known=sorted(CACHES.content)), host, guesses)
        if got.guess is not None:
            facts, plan, answers = got.guess.facts, got.guess.plan, got.answers
            host.patches = plan.results
        else:
            facts = got.facts
            plan = make(facts)
            host.patches = plan.results
            if opts.dry_run or not plan.needs_commit():
                _remember(transport, request, [got.answer])
                return
            answers = _commit_chained(transport, plan, opts.level, request)
        host.restart_required, ran, after = _carry_out(transport, plan, opts.level, answers)
        _remember(transport, request, [after, got.answer])
        _rollback_recheck(transport, plan, facts, opts.level, state_dir, ran)

    done = frozenset({"rolled_back"})
    return _host_run("rollback", transport, lambda host: _retrying(host, done, lambda: once(host)))


def _rollback_recheck(
    transport: Transport,
    plan: Plan,
    facts: HostFacts,
    level: Level,
    state_dir: str | None,
    ran: dict[str, list[ProbeResult]],
) -> None:
    """The kept specs' checks after a partial rollback. One that fails is judged against the
    bytes from before (plan_redo puts them back): failing there too, it says nothing about the
    specs taken out ("could not check here"), and the rollback is committed again; passing
    there, the kept spec needs them, and the previous bytes stay (still_needed)."""
    chained = _chained_checks(plan, level)
    failed: dict[str, ProbeResult] = {}
    for sid in plan.checks:
        got = ran[sid] if sid in ran else _run_checks(transport, chained.get(sid, []))
        bad = next((p for p in got if not p.ok), None)
        if bad is not None:
            failed[sid] = bad
    if not failed:
        return
    back = plan_redo(plan, facts)
    _commit(transport, back, state_dir)
    needs: dict[str, ProbeResult] = {}
    for sid, bad in failed.items():
        again = _run_checks(transport, [c for c in chained[sid] if c.get("name") == bad.name])
        if all(p.ok for p in again):
            needs[sid] = bad
    if needs:
        undone(plan, back, needs, still_needed)
        return
    _commit(transport, plan, state_dir)
    could_not_check(plan, failed)


def status(
    specs: list[PatchSpec], transport: Transport, opts: Options, state_dir: str | None = None
) -> HostResult:
    """With specs: their static verify. Without: everything the journal says vpatch applied."""
    if specs:
        host = verify(specs, transport, Options(level="static"), state_dir)
        host.ok = host_ok("status", host)
        return host

    def body(host: HostResult) -> None:
        # procs_for None: who runs code older than ANY journaled file (apply's scan, for all)
        request = dict(_inspect_request([], state_dir), procs_for=None)
        got = _inspect(transport, request, host)
        _remember(transport, request, [got.answer])
        host.patches = status_journal(got.facts)
        host.restart_required = got.facts.restart_required
        from patcher import rolloutresume  # where the last `vpatch rollout` got to on this host

        host.rollout_step, bad = rolloutresume.last_step(got.answer.get("rollout"))
        host.warnings += bad

    return _host_run("status", transport, body)


def connect_error(target: str, exc: HostError) -> HostResult:
    return HostResult(target=target, ok=False, error=exc.message, hint=exc.hint or None)
