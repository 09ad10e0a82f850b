"""Per host: inspect -> choose variant -> rewrite -> commit -> verify -> record.

The controller does all thinking (variant choice, libcst rewrites, diffs, outcomes); the agent
only reports facts and performs checked, atomic writes. That keeps the agent small and
stdlib-only, and lets one parse serve many hosts with the same file (see `_rewrite`).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from patcher import metrics, rewrite_cache
from patcher.errors import AgentError, HostError, VpatchError
from patcher.result import FileChange, HostResult, PatchResult, ProbeResult, host_ok
from patcher.rewrite import RewriteResult, apply_edits
from patcher.spec import Edit, PatchSpec, Variant
from patcher.transport import Transport

Level = Literal["static", "import", "full"]
_EDITS = TypeAdapter(list[Edit])
_CONFLICT_RETRIES = 3
# TEST-ONLY: a fault point spec (patcher/agent/faults.py) sent with every commit request, so the
# crash tests reach agents over SSH too. Deliberately not a CLI flag; unset, nothing changes.
TEST_FAULT_ENV = "VPATCH_TEST_FAULT"


@dataclass(frozen=True)
class Options:
    dry_run: bool = False
    force: bool = False
    level: Level = "full"
    metrics_url: str | None = None  # verify: scrape this on each host (the `metrics` probe)
    min_acceptance: float | None = None  # verify: overrides [metrics] min_acceptance_rate
    metrics_window: float | None = None  # verify: judge the counters' increase over N seconds


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def unified_diff(rel: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{rel}",
            tofile=f"b/{rel}",
        )
    )


# (sha256 of input, spec digest, variant index) -> result. Rewrites are pure, so 32 hosts with
# the same file content cost one libcst parse.
_REWRITE_CACHE: dict[tuple[str, str, int], RewriteResult] = {}
REWRITE_STATS = {"parses": 0, "hits": 0}
# sha256 -> text of every target file seen this run: inspect then sends only hashes for these,
# so a fleet of identical hosts transfers each file's text once.
_CONTENT: dict[str, str] = {}


_CACHE_LOCK = threading.Lock()
_KEY_LOCKS: dict[tuple[str, str, int], threading.Lock] = {}


def _rewrite(text: str, spec: PatchSpec, index: int, variant: Variant) -> RewriteResult:
    """Single-flight per key: 8 hosts inspected at once with the same file wait for ONE parse.
    Misses go to the on-disk cache of earlier runs (patcher.rewrite_cache) before libcst."""
    key = (sha256_text(text), spec.digest, index)
    with _CACHE_LOCK:
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:
        hit = _REWRITE_CACHE.get(key) or rewrite_cache.get(key[0], spec, index)
        if hit is not None:
            with _CACHE_LOCK:
                REWRITE_STATS["hits"] += 1
                _REWRITE_CACHE[key] = hit
            return hit
        res = apply_edits(text, variant.edit)
        rewrite_cache.put(key[0], spec, index, res)
        with _CACHE_LOCK:
            REWRITE_STATS["parses"] += 1
            _REWRITE_CACHE[key] = res
        return res


# ---------------------------------------------------------------------------------------------
# Facts from the host


@dataclass
class Facts:
    """The inspect answer, with lookups the planners need."""

    raw: dict[str, Any]

    @property
    def python(self) -> str:
        py = self.raw.get("python", {})
        return f"{py.get('executable', '?')} ({py.get('version', '?')})"

    def version(self, package: str) -> str | None:
        v = self.raw["packages"].get(package, {}).get("version")
        return v if isinstance(v, str) else None

    def file(self, package: str, rel: str) -> dict[str, Any]:
        info: dict[str, Any] = self.raw["packages"][package]["files"][rel]
        return info

    @property
    def restart_required(self) -> list[dict[str, Any]]:
        """Processes of the env started before vpatch last wrote a file of the inspected specs:
        they still run the code from before (the patch is on disk, not in them)."""
        found: list[dict[str, Any]] = self.raw.get("restart_required", [])
        return found

    def journal(self, path: str) -> dict[str, Any] | None:
        st: dict[str, Any] | None = self.raw.get("journal", {}).get(path)
        return st

    @property
    def warnings(self) -> list[str]:
        """What the agent skipped in the host's state (ill-formed journal lines, journaled
        paths outside site-packages): said in the report, never fatal."""
        return [str(w) for w in self.raw.get("warnings") or []]


def _inspect(
    transport: Transport, specs: list[PatchSpec], state_dir: str | None, procs: bool = False
) -> Facts:
    """ONE agent call for every fact about the host; with `procs`, the restart-required scan
    for the specs' files rides along (verify would otherwise need a second round trip)."""
    packages: dict[str, list[str]] = {}
    for spec in specs:
        files = packages.setdefault(spec.package, [])
        for var in spec.variant:
            if var.file and var.file not in files:
                files.append(var.file)
    request = {
        "op": "inspect",
        "packages": packages,
        "state_dir": state_dir,
        "known": sorted(_CONTENT),
    }
    if procs:
        request["procs_for"] = [s.id for s in specs]
    res = _call(transport, request)
    for pkg in res.get("packages", {}).values():
        for info in pkg.get("files", {}).values():
            sha = info.get("sha256")
            if info.get("text") is not None and sha:
                _CONTENT[sha] = info["text"]
            elif info.pop("cached", False) and sha in _CONTENT:
                info["text"] = _CONTENT[sha]
    for st in res.get("journal", {}).values():
        text = st.pop("current_text", None)
        if isinstance(text, str) and st.get("current"):
            _CONTENT[st["current"]] = text
    return Facts(res)


def _call(transport: Transport, request: dict[str, Any]) -> dict[str, Any]:
    res = transport.call(request)
    if not res.get("ok"):
        raise AgentError(
            f"{transport.target}: {res.get('error')}", _AGENT_HINTS.get(res.get("kind"), "")
        )
    return res


_AGENT_HINTS: dict[Any, str] = {
    "conflict": "the file changed while vpatch was working; run the command again",
    "locked": "another vpatch is working on this environment; wait and retry",
    "os": "check permissions of site-packages and the state dir (try --sudo for root-owned envs)",
    "syntax": "the target interpreter is older than the patched code needs",
    # patcher/agent/statedir.py KIND_STATE, confine.py KIND_CONFINED
    "state": "vpatch uses only state it made itself; --state-dir DIR keeps it elsewhere",
    "confined": "a journaled path left site-packages or went through a link: check the env",
}


# ---------------------------------------------------------------------------------------------
# Planning: what each spec needs on this host


@dataclass
class Plan:
    """One spec on one host: the decision, and the write it needs (if any)."""

    spec: PatchSpec
    result: PatchResult
    variant: Variant | None = None
    path: str | None = None
    rel: str | None = None
    before: str | None = None  # text this spec's edit starts from
    after: str | None = None  # text after this spec's edit
    reset: bool = False  # journal says applied, but the file is pristine again (reinstalled)


def _base_result(spec: PatchSpec, version: str | None) -> PatchResult:
    return PatchResult(id=spec.id, package=spec.package, version=version, outcome="failed")


def _choose(spec: PatchSpec, facts: Facts) -> tuple[PatchResult, int, Variant | None]:
    """Variant for the installed version; a result with the final outcome when there is none."""
    version = facts.version(spec.package)
    res = _base_result(spec, version)
    if version is None:
        res.outcome, res.message = "not_applicable", f"package {spec.package} is not installed"
        return res, -1, None
    chosen = spec.choose_variant(version)
    if chosen is None:
        ranges = "; ".join(v.versions for v in spec.variant)
        res.outcome = "not_applicable"
        res.message = f"{spec.package} {version} is in no variant's range ({ranges})"
        return res, -1, None
    index, variant = chosen
    res.variant = index
    if variant.upstream is not None:
        res.outcome, res.message = "satisfied_upstream", variant.upstream
        return res, index, None
    return res, index, variant


def _file_problem(res: PatchResult, info: dict[str, Any], rel: str) -> bool:
    if info.get("error"):
        res.outcome, res.message = "failed", f"{rel} {info['error']}"
        return True
    if not info.get("exists"):
        res.outcome = "anchor_missing"
        res.message = f"{rel} does not exist in {res.package} {res.version}"
        return True
    return False


def _plan_apply(specs: list[PatchSpec], facts: Facts, opts: Options) -> list[Plan]:
    plans: list[Plan] = []
    texts: dict[str, str] = {}  # path -> text after the specs planned so far (stacking)
    for spec in specs:
        res, index, variant = _choose(spec, facts)
        plan = Plan(spec, res, variant)
        plans.append(plan)
        if variant is None:
            continue
        assert variant.file is not None
        info = facts.file(spec.package, variant.file)
        if _file_problem(res, info, variant.file):
            continue
        path, rel = info["path"], variant.file
        plan.path, plan.rel = path, rel
        st = facts.journal(path) or {"applied": {}, "expected": None}
        current, record = info["sha256"], info["record_sha256"]
        drifted = bool(st["applied"]) and current != st["expected"]
        if drifted and current == record:
            plan.reset = True  # reinstalled since vpatch wrote it: pristine again, start over
        elif drifted and not opts.force:
            res.outcome = "drifted"
            res.message = (
                f"{rel} changed since vpatch wrote it (sha256 {current[:12]}, journal says "
                f"{str(st['expected'])[:12]}); --force patches the file as it is now"
            )
            continue
        applied_before = spec.id in st["applied"] and not drifted and not plan.reset
        same_edits = applied_before and st["applied"][spec.id].get("edits") == _EDITS.dump_python(
            variant.edit, mode="json"
        )
        if same_edits:
            res.outcome, res.message = "already_applied", f"{rel} has the journal's hash"
            continue
        # Not applied, or applied from an older text of this spec: the rewrite decides.
        text = texts.get(path, info["text"])
        rw = _rewrite(text, spec, index, variant)
        if rw.status in ("anchor_missing", "ambiguous"):
            res.outcome, res.message = rw.status, f"{rel}: {rw.message}"
            continue
        if rw.status == "invalid":
            res.outcome, res.message = "failed", f"{rel}: {rw.message}"
            continue
        if rw.status == "unchanged":
            if applied_before:
                res.outcome = "already_applied"
                res.message = f"{rel} has the journal's hash and the spec's current edits"
            else:
                res.outcome = "satisfied_upstream"
                res.message = f"{rel} already has the desired code ({rw.message})"
            continue
        trusted = current == record or (st["applied"] and current == st["expected"])
        if not (trusted or plan.reset or opts.force or path in texts):
            res.outcome = "failed"
            res.message = (
                f"{rel} differs from pip's RECORD hash and vpatch did not change it "
                "(edited by hand?); --force patches it anyway"
            )
            continue
        plan.before, plan.after = text, rw.source
        texts[path] = rw.source
        res.outcome = "would_apply" if opts.dry_run else "applied"
        res.files = [
            FileChange(
                path, sha256_text(text), sha256_text(rw.source), unified_diff(rel, text, rw.source)
            )
        ]
    return plans


_SPACE_MARGIN = 64 * 1024  # directory entries, the .pyc, the journal line


def _preflight(facts: Facts, plans: list[Plan]) -> None:
    """Refuse, before the commit, writes the host cannot take: an unwritable state dir or
    target directory (read-only image, no --sudo), or no room for the file or its backup.

    Known from inspect alone, so such a host costs one error line, not a lock file, a backup
    or a journal line; and host-wide, like the commit itself, which writes all or nothing."""
    state = facts.raw.get("state") or {}
    sdir = state.get("dir", "the state dir")
    problem, hint = "", "run with --sudo for a root-owned environment, or pass --state-dir DIR"
    if state.get("writable") is False:
        problem = f"cannot write vpatch's state in {sdir}: {state.get('why')}"
    backup = 0  # the state dir's share, summed over the commit: backups and journal lines
    for p in plans:
        if problem or p.after is None or p.path is None or p.before is None:
            continue
        info = facts.file(p.spec.package, p.rel or "")
        folder = os.path.dirname(p.path)
        # The temp file holds the new bytes while the old file still exists.
        need, free = len(p.after.encode()) + _SPACE_MARGIN, info.get("free")
        edits = len(_EDITS.dump_json(p.variant.edit)) if p.variant else 0  # in the journal line
        backup += len(p.before.encode()) + edits + _SPACE_MARGIN
        state_free = state.get("free")
        if info.get("writable") is False:
            problem = f"cannot write in {folder}: {info.get('why_unwritable')}"
            hint = "remount it read-write or fix its permissions (--sudo for a root-owned env)"
        elif isinstance(free, int) and free < need:
            problem = f"no space left for {p.rel} in {folder} ({free} bytes free, {need} needed)"
            hint = "free space on that filesystem, then run again"
        elif isinstance(state_free, int) and state_free < backup:
            problem = (
                f"no space left for backups in {sdir} ({state_free} bytes free, {backup} needed)"
            )
            hint = "free space there, or pass --state-dir DIR on another filesystem"
    if not problem:
        return
    exc = HostError(f"{problem}; nothing was changed", hint)
    for p in plans:
        if p.after is not None:
            p.result.outcome, p.result.message = "failed", exc.message
    raise exc


def _journal_entry(action: str, plan: Plan, facts: Facts, reason: str = "") -> dict[str, Any]:
    assert plan.variant is not None and plan.before is not None and plan.after is not None
    return {
        "action": action,
        "spec": plan.spec.id,
        "spec_hash": plan.spec.digest,
        "package": plan.spec.package,
        "version": facts.version(plan.spec.package),
        "file": plan.rel,
        "path": plan.path,
        "before": sha256_text(plan.before),
        "after": sha256_text(plan.after),
        "edits": _EDITS.dump_python(plan.variant.edit, mode="json"),
        "reason": reason,
    }


def _commit(
    transport: Transport,
    writes: list[dict[str, Any]],
    entries: list[dict[str, Any]],
    state_dir: str | None,
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "op": "commit",
        "writes": writes,
        "journal": entries,
        "state_dir": state_dir,
    }
    fault = os.environ.get(TEST_FAULT_ENV)
    if fault:  # TEST-ONLY (patcher/agent/faults.py): crash the agent at a named commit step
        request["fault"] = fault
    return _call(transport, request)


def _writes_for(
    plans: list[Plan], facts: Facts
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One write per file (final text after all its specs), journal entries chained per spec."""
    writes: dict[str, dict[str, Any]] = {}
    entries: list[dict[str, Any]] = []
    for plan in plans:
        if plan.after is None or plan.path is None:
            continue
        if plan.path not in writes:
            info = facts.file(plan.spec.package, plan.rel or "")
            writes[plan.path] = {"path": plan.path, "expect_sha256": info["sha256"]}
            if plan.reset:
                entries.append({"action": "reset", "path": plan.path, "reason": "pristine again"})
        writes[plan.path]["text"] = plan.after
        entries.append(_journal_entry("apply", plan, facts))
    return list(writes.values()), entries


# ---------------------------------------------------------------------------------------------
# Verification


def _checks(spec: PatchSpec, variant: Variant | None, level: Level) -> list[dict[str, Any]]:
    """Import and probe checks for one spec. A probe imports its module itself, so a module
    already covered by a probe is not imported a second time at level full (each costs ~8 s
    of torch import on vLLM)."""
    if level == "static":
        return []
    out: list[dict[str, Any]] = []
    probes = spec.probe if level == "full" else []
    covered = {p.module for p in probes}
    if variant is not None and variant.module and variant.module not in covered:
        out.append({"name": f"import {variant.module}", "module": variant.module, "code": ""})
    for p in probes:
        out.append({"name": p.name, "module": p.module, "code": p.code, "timeout": p.timeout})
    return out


def _run_checks(transport: Transport, checks: list[dict[str, Any]]) -> list[ProbeResult]:
    if not checks:
        return []
    res = _call(transport, {"op": "verify", "checks": checks})
    return [
        ProbeResult(c["name"], bool(c["ok"]), str(c["detail"]), float(c.get("seconds", 0)))
        for c in res["checks"]
    ]


def _verify_after_write(
    transport: Transport, plans: list[Plan], facts: Facts, opts: Options, state_dir: str | None
) -> None:
    """Probe what was just written; on failure put the previous bytes back and say so."""
    written = [p for p in plans if p.after is not None]
    failed: list[Plan] = []
    for plan in written:
        plan.result.probes = _run_checks(transport, _checks(plan.spec, plan.variant, opts.level))
        if not all(pr.ok for pr in plan.result.probes):
            failed.append(plan)
    if not failed:
        return
    # Restore every file a failing spec touched to the bytes inspect saw (backed up by commit).
    paths = {p.path for p in failed}
    writes, entries = [], []
    for path in paths:
        group = [p for p in written if p.path == path]
        info = facts.file(group[0].spec.package, group[0].rel or "")
        writes.append(
            {
                "path": path,
                "expect_sha256": sha256_text(group[-1].after or ""),
                "restore_sha256": info["sha256"],
            }
        )
        for plan in reversed(group):
            back = Plan(
                plan.spec, plan.result, plan.variant, plan.path, plan.rel, plan.after, plan.before
            )
            entries.append(_journal_entry("rollback", back, facts, reason="verify failed"))
    _commit(transport, writes, entries, state_dir)
    for plan in written:
        if plan.path in paths:
            bad = [pr for pr in plan.result.probes if not pr.ok]
            plan.result.outcome = "failed"
            why = (
                f"verify failed ({bad[0].name}: {bad[0].detail})"
                if bad
                else "a spec on the same file failed verify"
            )
            plan.result.message = f"{why}; previous bytes restored"


# ---------------------------------------------------------------------------------------------
# Commands


def _host_run(command: str, transport: Transport, body: Callable[[HostResult], None]) -> HostResult:
    started = time.monotonic()
    host = HostResult(target=transport.target)
    try:
        body(host)
    except VpatchError as exc:
        host.error = _error_text(exc)
    host.ok = host_ok(command, host)
    host.seconds = round(time.monotonic() - started, 3)
    return host


def apply(
    specs: list[PatchSpec], transport: Transport, opts: Options, state_dir: str | None = None
) -> HostResult:
    def body(host: HostResult) -> None:
        for attempt in range(_CONFLICT_RETRIES):
            facts = _inspect(transport, specs, state_dir)
            host.python = facts.python
            host.warnings = facts.warnings
            plans = _plan_apply(specs, facts, opts)
            host.patches = [p.result for p in plans]
            writes, entries = _writes_for(plans, facts)
            if writes:
                _preflight(facts, plans)
            if opts.dry_run or not writes:
                break
            try:
                done = _commit(transport, writes, entries, state_dir)
            except HostError as exc:
                if _conflict(exc) and attempt + 1 < _CONFLICT_RETRIES:
                    continue  # someone wrote between inspect and commit: look again
                # Refused, or outcome unknown (agent killed, connection cut): not "applied".
                for p in plans:
                    if p.after is not None:
                        p.result.outcome, p.result.message = "failed", exc.message
                raise
            host.restart_required = done.get("restart_required", [])
            _verify_after_write(transport, plans, facts, opts, state_dir)
            if not any(p.result.outcome == "applied" for p in plans if p.after is not None):
                host.restart_required = []  # every write was undone: disk = what they loaded
            break

    return _host_run("apply", transport, body)


def _conflict(exc: HostError) -> bool:
    """The agent refused a commit because a file changed after inspect (a concurrent run)."""
    return isinstance(exc, AgentError) and "changed since inspection" in exc.message


def drift_state(current: str | None, record: str | None, base: str | None) -> str:
    """What a drifted file is now, in words: the first thing to know before fixing it."""
    if current is None:
        return "missing"
    if current == record:
        return "pristine per pip's RECORD (reinstalled?); `vpatch apply` patches it again"
    if current == base:
        return "the bytes vpatch found before patching (not pip's RECORD)"
    return f"unknown content (sha256 {current[:12]}, edited by hand or another tool?)"


def _verify_one(spec: PatchSpec, facts: Facts) -> tuple[PatchResult, Variant | None]:
    res, index, variant = _choose(spec, facts)
    if variant is None:
        return res, None
    assert variant.file is not None
    info = facts.file(spec.package, variant.file)
    if _file_problem(res, info, variant.file):
        return res, variant
    st = facts.journal(info["path"]) or {"applied": {}, "expected": None}
    rel, current = variant.file, info["sha256"]
    if spec.id in st["applied"] and current != st["expected"]:
        what = drift_state(current, info["record_sha256"], st.get("base"))
        res.outcome = "drifted"
        res.message = f"{rel} changed since vpatch wrote it; it is now {what}"
        return res, variant
    rw = _rewrite(info["text"], spec, index, variant)
    if rw.status == "unchanged":
        if spec.id in st["applied"]:
            res.outcome, res.message = "applied", f"{rel} has the journal's hash and the edit"
        else:
            res.outcome, res.message = "satisfied_upstream", f"{rel} already has the desired code"
    elif rw.status == "changed":
        res.outcome, res.message = "not_applied", f"{rel} still needs the patch"
    else:
        res.outcome = rw.status if rw.status != "invalid" else "failed"
        res.message = f"{rel}: {rw.message}"
    return res, variant


def verify(
    specs: list[PatchSpec], transport: Transport, opts: Options, state_dir: str | None = None
) -> HostResult:
    def body(host: HostResult) -> None:
        facts = _inspect(transport, specs, state_dir, procs=True)
        host.python = facts.python
        host.warnings = facts.warnings
        host.restart_required = facts.restart_required
        got = None
        if opts.metrics_url:
            got = metrics.scrape(transport, opts.metrics_url, window=opts.metrics_window)
        for spec in specs:
            res, variant = _verify_one(spec, facts)
            host.patches.append(res)
            if res.outcome in ("applied", "satisfied_upstream", "not_applied", "drifted"):
                res.probes = _run_checks(transport, _checks(spec, variant, opts.level))
            if got is not None:
                loaded = res.outcome in ("applied", "satisfied_upstream") and all(
                    p.ok for p in res.probes
                )
                stale = len(host.restart_required)
                res.probes.append(
                    metrics.probe(got, spec.metrics, opts.min_acceptance, loaded, stale)
                )
            if res.outcome in ("applied", "satisfied_upstream") and not all(
                p.ok for p in res.probes
            ):
                res.outcome = "failed"
                bad = next(p for p in res.probes if not p.ok)
                res.message = f"{bad.name}: {bad.detail}"

    return _host_run("verify", transport, body)


@dataclass
class _Restack:
    path: str
    rel: str
    entries: list[dict[str, Any]] = field(default_factory=list)


def rollback(
    specs: list[PatchSpec] | None,
    transport: Transport,
    opts: Options,
    state_dir: str | None = None,
) -> HostResult:
    """Undo specs (all vpatch did, when `specs` is None), re-applying the ones that stay.

    Like apply, a commit refused because a concurrent run changed a file is planned again
    from a fresh inspect (up to _CONFLICT_RETRIES times)."""

    def body(host: HostResult) -> None:
        for attempt in range(_CONFLICT_RETRIES):
            try:
                once(host)
                return
            except HostError as exc:
                if _conflict(exc) and attempt + 1 < _CONFLICT_RETRIES:
                    continue
                for res in host.patches:  # refused, or outcome unknown: not "rolled_back"
                    if res.outcome == "rolled_back":
                        res.outcome, res.message = "failed", exc.message
                raise

    def once(host: HostResult) -> None:
        facts = _inspect(transport, specs or [], state_dir)
        host.python = facts.python
        host.warnings = facts.warnings
        wanted = None if specs is None else {s.id for s in specs}
        journal: dict[str, dict[str, Any]] = facts.raw.get("journal", {})
        results: dict[str, PatchResult] = {}
        writes, entries = [], []
        for path, st in sorted(journal.items()):
            applied: dict[str, dict[str, Any]] = st["applied"]
            drop = [s for s in applied if wanted is None or s in wanted]
            if not drop:
                continue
            keep = [applied[s] for s in applied if s not in drop]
            write, new_entries, problem = _rollback_file(path, st, drop, keep, opts)
            for sid in drop:
                e = applied[sid]
                res = results.setdefault(
                    sid, PatchResult(sid, e.get("package", "?"), e.get("version"), "rolled_back")
                )
                if problem:
                    res.outcome, res.message = problem
                    continue
                res.outcome = "would_apply" if opts.dry_run else "rolled_back"
                assert write is not None
                res.message = (
                    "restored pristine bytes"
                    if not keep
                    else f"re-applied {len(keep)} other spec(s)"
                )
                res.files.append(FileChange(path, st["current"], write["after"], write["diff"]))
            if write and not problem:
                writes.append({k: v for k, v in write.items() if k not in ("after", "diff")})
                entries.extend(new_entries)
        for spec in specs or []:
            if spec.id not in results:
                results[spec.id] = PatchResult(
                    spec.id,
                    spec.package,
                    facts.version(spec.package),
                    "not_applied",
                    "nothing to roll back",
                )
        host.patches = list(results.values())
        if writes and not opts.dry_run:
            done = _commit(transport, writes, entries, state_dir)
            host.restart_required = done.get("restart_required", [])

    return _host_run("rollback", transport, body)


def _rollback_file(
    path: str,
    st: dict[str, Any],
    drop: list[str],
    keep: list[dict[str, Any]],
    opts: Options,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], tuple[Any, str] | None]:
    """The write and journal entries that take one file back to base + the kept specs."""
    current, base, base_text = st["current"], st["base"], st["base_text"]
    rel = st["applied"][drop[0]].get("file", path)
    if current != st["expected"] and not opts.force:
        return (
            None,
            [],
            ("drifted", f"{rel} changed since vpatch wrote it; --force restores anyway"),
        )
    if base_text is None:
        why = st.get("base_error") or f"backup {str(base)[:12]} is missing or unreadable"
        return None, [], ("failed", f"{rel}: {why}")
    text = base_text
    for e in keep:
        rw = apply_edits(text, _EDITS.validate_python(e["edits"]))
        if rw.status not in ("changed", "unchanged"):
            return None, [], ("failed", f"cannot re-apply {e['spec']} on {rel}: {rw.message}")
        text = rw.source
    after = sha256_text(text)
    write: dict[str, Any] = {"path": path, "expect_sha256": current, "after": after}
    if keep:
        write["text"] = text
    else:
        write["restore_sha256"] = base
    current_text = _current_text(st)
    write["diff"] = unified_diff(rel, current_text, text) if current_text is not None else ""
    entries = []
    before = current
    for sid in drop:
        e = st["applied"][sid]
        entries.append(
            {k: e.get(k) for k in ("spec", "spec_hash", "package", "version", "file", "path")}
            | {"action": "rollback", "before": before, "after": after, "reason": "rollback"}
        )
        before = after
    return write, entries, None


def _current_text(st: dict[str, Any]) -> str | None:
    """The file's current text (for the diff): as inspect sent it, else rebuilt from base +
    applied edits."""
    if st["current"] in _CONTENT:
        return _CONTENT[st["current"]]
    if st["base_text"] is None or st["current"] != st["expected"]:
        return None
    text: str = st["base_text"]
    for e in st["applied"].values():
        rw = apply_edits(text, _EDITS.validate_python(e["edits"]))
        text = rw.source
    return text if sha256_text(text) == st["current"] else None


def status(
    specs: list[PatchSpec], transport: Transport, opts: Options, state_dir: str | None = None
) -> HostResult:
    """With specs: their static verify. Without: everything the journal says vpatch applied."""
    if specs:
        host = verify(specs, transport, Options(level="static"), state_dir)
        host.ok = host_ok("status", host)
        return host

    def body(host: HostResult) -> None:
        facts = _inspect(transport, [], state_dir)
        host.python = facts.python
        host.warnings = facts.warnings
        records = _record_hashes(transport, facts, state_dir)
        for path, st in sorted(facts.raw.get("journal", {}).items()):
            for sid, e in st["applied"].items():
                ok = st["current"] == st["expected"]
                res = PatchResult(
                    sid, e.get("package", "?"), e.get("version"), "applied" if ok else "drifted"
                )
                now = drift_state(st["current"], records.get(path), st.get("base"))
                res.message = f"{e.get('file')}: " + (
                    "has the journal's hash" if ok else f"changed since vpatch wrote it; now {now}"
                )
                res.files = [FileChange(path, e.get("before", ""), e.get("after", ""))]
                host.patches.append(res)

    return _host_run("status", transport, body)


def _record_hashes(transport: Transport, facts: Facts, state_dir: str | None) -> dict[str, str]:
    """path -> pip's RECORD sha256 for drifted journal files (a second inspect, only on drift)."""
    wanted: dict[str, list[str]] = {}
    for st in facts.raw.get("journal", {}).values():
        if st["applied"] and st["current"] != st["expected"]:
            for e in st["applied"].values():
                if e.get("package") and e.get("file"):
                    wanted.setdefault(e["package"], []).append(e["file"])
    if not wanted:
        return {}
    res = _call(transport, {"op": "inspect", "packages": wanted, "state_dir": state_dir})
    out: dict[str, str] = {}
    for pkg in res.get("packages", {}).values():
        for info in pkg.get("files", {}).values():
            if info.get("record_sha256"):
                out[info["path"]] = info["record_sha256"]
    return out


def _error_text(exc: VpatchError) -> str:
    return exc.message if not exc.hint else f"{exc.message} (hint: {exc.hint})"


def connect_error(target: str, exc: HostError) -> HostResult:
    return HostResult(target=target, ok=False, error=_error_text(exc))
