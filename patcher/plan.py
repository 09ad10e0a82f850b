"""PURE: what a command must do on one host, decided from that host's facts and the specs.

Every outcome vpatch reports is set here and nowhere else; `engine.py` only carries facts in
and the plan's writes out. No I/O and no module state: the one costly step, a libcst rewrite,
comes in as a `Rewriter` the caller may cache. So each decision is pinned by data
(`tests/cases/plan/*.json`: facts + specs in, outcomes + writes + journal out) and runs in
milliseconds, without a venv.

The journal's truth, per file (folded by the agent, `patcher/agent/journal.py`): the specs
vpatch applied in order, each with the exact edits it applied, its spec digest, the package
version and RECORD hash it applied against; the **base** (bytes before the first of them, in
`backups/`) and the **expected** hash (what vpatch last wrote). From that:

- a spec applied again with other edits (same id, changed spec) is rebuilt as base + every
  applied spec's edits with its new ones in its place, never stacked on its own old output;
- rolling back one spec rebuilds base + the remaining specs' recorded edits;
- bytes of another version are never written: a file that is pip's bytes again retires the
  entries (`superseded` after an upgrade), and a base is restored only for the version it came
  from (or when the new RECORD has the very same bytes);
- a file that differs from RECORD with no journal entry is `modified`, never green.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from patcher.agent import protocol
from patcher.result import FileChange, Outcome, PatchResult, ProbeResult
from patcher.rewrite import RewriteResult, apply_edits
from patcher.spec import Edit, PatchSpec, Variant

Level = Literal["static", "import", "full"]
Rewriter = Callable[[str, PatchSpec, int, str, Sequence[Edit]], RewriteResult]


def pure_rewriter(
    text: str, spec: PatchSpec, index: int, rel: str, edits: Sequence[Edit]
) -> RewriteResult:
    """The uncached rewriter (golden cases, matrix); the engine passes a cached one."""
    return apply_edits(text, edits)


@dataclass(frozen=True)
class Options:
    dry_run: bool = False
    force: bool = False
    level: Level = "full"
    metrics_url: str | None = None  # verify: scrape this on each host (the `metrics` probe)
    min_acceptance: float | None = None  # verify: overrides [metrics] min_acceptance_rate
    metrics_window: float | None = None  # verify: judge the counters' increase over N seconds
    adopt: bool = False  # apply: record a hand edit that already has the spec's code as applied


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


def dump_edits(edits: Sequence[Edit]) -> list[Any]:
    return [e.model_dump(mode="json", exclude_none=True) for e in edits]


def load_edits(raw: Any) -> list[Edit]:
    from pydantic import TypeAdapter

    return TypeAdapter(list[Edit]).validate_python(raw)


# ---------------------------------------------------------------------------------------------
# Facts: the inspect answer, typed


@dataclass(frozen=True)
class FileFact:
    rel: str
    path: str
    exists: bool
    sha256: str | None
    record_sha256: str | None
    text: str | None
    error: str | None = None
    writable: bool | None = None
    why_unwritable: str | None = None
    free: int | None = None
    in_record: bool = True  # False: not pip's file of the package (a module add_file created)
    record_text: str | None = None  # pip's bytes of the file (from the wheel), for --adopt


@dataclass(frozen=True)
class JournalFile:
    """One journaled file, as the agent folded the journal (see module docstring)."""

    path: str
    applied: dict[str, dict[str, Any]]  # spec id -> its last apply entry, in apply order
    expected: str | None
    base: str | None
    base_text: str | None
    current: str | None
    current_text: str | None = None
    created: bool = False  # vpatch created the file: no spec left means no file
    package_version: str | None = None  # installed version of the entries' package now
    record_sha256: str | None = None  # pip's RECORD hash of the file now
    base_error: str | None = None  # why the backup could not be read (corrupt, unreadable)

    @property
    def in_sync(self) -> bool:
        return bool(self.applied) and self.current == self.expected

    @property
    def reinstalled(self) -> bool:
        """pip's bytes again (reinstall or upgrade): the journal's entries no longer hold."""
        return (
            bool(self.applied)
            and self.current != self.expected
            and self.current is not None
            and self.current == self.record_sha256
        )

    @property
    def other_version(self) -> bool:
        """The entries were made against a release other than the one installed now."""
        return any(e.get("version") != self.package_version for e in self.applied.values())


@dataclass(frozen=True)
class HostFacts:
    python: str
    versions: dict[str, str | None]
    files: dict[str, dict[str, FileFact]]  # package -> rel -> fact
    journal: dict[str, JournalFile]
    state: dict[str, Any] = field(default_factory=dict)
    restart_required: list[dict[str, Any]] = field(default_factory=list)
    incomplete: list[dict[str, Any]] = field(default_factory=list)
    # what the agent skipped in the host's state (ill-formed journal lines, journaled paths
    # outside site-packages): said in the report, never fatal
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def from_answer(cls, raw: dict[str, Any]) -> HostFacts:
        py = raw.get("python", {})
        versions: dict[str, str | None] = {}
        files: dict[str, dict[str, FileFact]] = {}
        for name, pkg in (raw.get("packages") or {}).items():
            versions[name] = pkg.get("version")
            files[name] = {
                rel: FileFact(
                    rel,
                    str(info.get("path", rel)),
                    bool(info.get("exists")),
                    info.get("sha256"),
                    info.get("record_sha256"),
                    info.get("text"),
                    info.get("error"),
                    info.get("writable"),
                    info.get("why_unwritable"),
                    info.get("free"),
                    info.get("in_record", True) is not False,
                    info.get("record_text"),
                )
                for rel, info in (pkg.get("files") or {}).items()
            }
        journal = {
            path: JournalFile(
                path,
                dict(st.get("applied") or {}),
                st.get("expected"),
                st.get("base"),
                st.get("base_text"),
                st.get("current"),
                st.get("current_text"),
                bool(st.get("created")),
                st.get("package_version"),
                st.get("record_sha256"),
                st.get("base_error"),
            )
            for path, st in (raw.get("journal") or {}).items()
        }
        return cls(
            f"{py.get('executable', '?')} ({py.get('version', '?')})",
            versions,
            files,
            journal,
            dict(raw.get("state") or {}),
            list(raw.get("restart_required") or []),
            list(raw.get("incomplete") or []),
            [str(w) for w in raw.get("warnings") or []],
        )

    def file(self, package: str, rel: str) -> FileFact:
        got = self.files.get(package, {}).get(rel)
        return got or FileFact(rel, rel, False, None, None, None, "was not inspected")


def wanted_files(specs: Sequence[PatchSpec]) -> dict[str, list[str]]:
    """package -> files inspect must report (every variant's, so one inspect serves all)."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        files = out.setdefault(spec.package, [])
        for var in spec.variant:
            for rel, _ in var.files() if var.upstream is None else []:
                if rel not in files:
                    files.append(rel)
    return out


# ---------------------------------------------------------------------------------------------
# The plan


@dataclass
class Write:
    """One file's write in a commit: new text, a backup's bytes, or removal."""

    path: str
    rel: str
    expect: str | None  # sha256 the file must have (None: it must not exist)
    before_text: str | None  # for the diff
    text: str | None = None
    restore: str | None = None
    delete: bool = False
    after: str | None = None  # sha256 after the write (None: removed)

    def request(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "expect_sha256": self.expect}
        if self.delete:
            out["delete"] = True
        elif self.restore is not None:
            out["restore_sha256"] = self.restore
        else:
            out["text"] = self.text
        return out


@dataclass
class Plan:
    results: list[PatchResult]
    writes: list[Write] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)
    # spec id -> the checks to run once the writes are on disk, and the paths it wrote
    checks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    touched: dict[str, list[str]] = field(default_factory=dict)
    # backups no entry needs once this plan is committed (another release's pristine bytes)
    gc: list[str] = field(default_factory=list)
    # --adopt: pip's bytes the commit stores as backups (the journal's base) before its entries
    backups: list[dict[str, str]] = field(default_factory=list)

    def needs_commit(self) -> bool:
        return bool(self.writes or self.entries)

    def result(self, spec_id: str) -> PatchResult:
        return next(r for r in self.results if r.id == spec_id)


def checks_for(spec: PatchSpec, variant: Variant | None, level: Level) -> list[dict[str, Any]]:
    """Import and probe checks for one spec. A probe imports its module itself, so a module
    already covered by a probe is not imported again at level full (each costs ~8 s of torch
    import on vLLM); the other changed modules are imported in one fresh interpreter."""
    if level == "static":
        return []
    probes = spec.probe if level == "full" else []
    covered = {p.module for p in probes}
    mods = [m for m in (variant.modules if variant is not None else []) if m not in covered]
    out: list[dict[str, Any]] = []
    if mods:
        code = "".join(f"import {m}\n" for m in mods[1:])
        out.append({"name": "import " + ", ".join(mods), "module": mods[0], "code": code})
    for p in probes:
        out.append({"name": p.name, "module": p.module, "code": p.code, "timeout": p.timeout})
    return out


def recorded_checks(entry: dict[str, Any], level: Level) -> list[dict[str, Any]]:
    """The checks an apply entry recorded (level full), cut to `level`."""
    if level == "static":
        return []
    got = [c for c in entry.get("checks") or [] if isinstance(c, dict)]
    return got if level == "full" else [c for c in got if str(c.get("name")).startswith("import")]


def choose(spec: PatchSpec, version: str | None) -> tuple[PatchResult, int, Variant | None]:
    """Variant for the installed version; a result with the final outcome when there is none."""
    res = PatchResult(id=spec.id, package=spec.package, version=version, outcome="failed")
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


def rewrite_outcome(status: str) -> Outcome:
    """A rewrite's status as apply reports it (matrix maps the same way)."""
    return {
        "changed": "would_apply",
        "unchanged": "satisfied_upstream",
        "anchor_missing": "anchor_missing",
        "ambiguous": "ambiguous",
    }.get(status, "failed")  # type: ignore[return-value]


def baked(version: str | None, fact: FileFact) -> str | None:
    """Words for a file of a release `vpatch wheel` built (local label `vpatch.<digest>`) that
    is pip's RECORD bytes: the spec's code in it is baked into the installed wheel, not an
    edit outside vpatch. None otherwise."""
    if not baked_release(version) or fact.sha256 is None or fact.sha256 != fact.record_sha256:
        return None
    return f"{fact.rel} has the desired code, {baked_release(version)}"


def baked_release(version: str | None) -> str:
    """How to take out what `vpatch wheel` baked into this release ("" if it is pip's own)."""
    public, _, local = (version or "").partition("+")
    if "vpatch" not in local.split("."):
        return ""
    return (
        f"baked into the installed wheel ({version}); installing pip's wheel of {public} "
        "takes it out"
    )


def drift_state(current: str | None, record: str | None, base: str | None) -> str:
    """What a drifted file is now, in words: the first thing to know before fixing it."""
    if current is None:
        return "missing"
    if current == record:
        return "pristine per pip's RECORD (reinstalled?); `vpatch apply` patches it again"
    if current == base:
        return "the bytes vpatch found before patching (not pip's RECORD)"
    return f"unknown content (sha256 {current[:12]}, edited by hand or another tool?)"


def _file_problem(fact: FileFact, edits: Sequence[Edit], res: PatchResult) -> str | None:
    if fact.error and not (_adds(edits) and not fact.in_record):
        res.outcome = "failed"
        return f"{fact.rel} {fact.error}"
    if not fact.exists and not _adds(edits):
        res.outcome = "anchor_missing"
        return f"{fact.rel} does not exist in {res.package} {res.version}"
    return None


def _adds(edits: Sequence[Edit]) -> bool:
    return any(e.op == "add_file" for e in edits)


def _replay(
    base: str, applied: dict[str, dict[str, Any]], replace: dict[str, Sequence[Edit]]
) -> tuple[str | None, str]:
    """base + every applied spec's recorded edits in journal order, `replace` substituting
    (an empty list drops a spec). Returns (text, "") or (None, why)."""
    text = base
    for sid, e in applied.items():
        edits = replace[sid] if sid in replace else load_edits(e.get("edits") or [])
        if not edits:
            continue
        rw = apply_edits(text, edits)
        if rw.status not in ("changed", "unchanged"):
            return None, f"cannot re-apply {sid}: {rw.message}"
        text = rw.source
    return text, ""


class _Apply:
    """apply's decision for a list of specs: per spec, per file; writes stack per file."""

    def __init__(self, facts: HostFacts, opts: Options, rewrite: Rewriter) -> None:
        self.facts, self.opts, self.rewrite = facts, opts, rewrite
        self.texts: dict[str, str] = {}  # path -> planned text so far (stacking)
        self.writes: dict[str, Write] = {}
        self.entries: list[dict[str, Any]] = []
        self.retired: set[str] = set()
        self.gc: list[str] = []

    def plan(self, specs: Sequence[PatchSpec]) -> Plan:
        out = Plan([])
        for spec in specs:
            version = self.facts.versions.get(spec.package)
            res, index, variant = choose(spec, version)
            out.results.append(res)
            if variant is None:
                self._retire_for(spec, res)
                continue
            parts = [self._part(spec, index, rel, edits, res) for rel, edits in variant.files()]
            problem = next((p for p in parts if p.outcome not in _PART_OK), None)
            if problem is not None:
                res.outcome, res.message = cast(Outcome, problem.outcome), problem.message
                continue
            changed = [p for p in parts if p.outcome in ("changed", "adopt")]
            if not changed:
                mine = any(p.outcome == "already_applied" for p in parts)
                res.outcome = "already_applied" if mine else "satisfied_upstream"
                res.message = "; ".join(p.message for p in parts)
                continue
            res.outcome = "would_apply" if self.opts.dry_run else "applied"
            res.message = "; ".join(p.message for p in changed if p.message)
            for p in changed:
                if p.outcome == "adopt":
                    self._adopt(spec, variant, p, res, out)
                else:
                    self._stage(spec, variant, p, res)
            out.checks[spec.id] = checks_for(spec, variant, self.opts.level)
            out.touched[spec.id] = [p.fact.path for p in changed if p.outcome == "changed"]
        out.writes = list(self.writes.values())
        out.entries = self.entries
        out.gc = self.gc
        return out

    def _retire(self, st: JournalFile) -> None:
        """The file is pip's bytes again: every entry of it stops counting."""
        if st.path in self.retired:
            return
        self.retired.add(st.path)
        was = sorted({str(e.get("version")) for e in st.applied.values()})
        reason = (
            f"{', '.join(was)} -> {st.package_version}: pip's bytes of the new release"
            if st.other_version
            else "pip's bytes again (reinstalled)"
        )
        self.entries.append(
            protocol.retire_entry(st.path, st.other_version, st.package_version, reason)
        )
        if st.other_version and st.base and st.base != st.current:
            self.gc.append(st.base)

    def _retire_for(self, spec: PatchSpec, res: PatchResult) -> None:
        """A spec that no longer fits leaves no entry behind where the file is pip's again."""
        for st in self.facts.journal.values():
            if spec.id in st.applied and st.reinstalled:
                self._retire(st)
                res.message += f"; journal entries of {st.path} retired (superseded)"

    def _part(
        self, spec: PatchSpec, index: int, rel: str, edits: Sequence[Edit], res: PatchResult
    ) -> _Part:
        fact = self.facts.file(spec.package, rel)
        why = _file_problem(fact, edits, res)
        if why:
            return _Part(fact, res.outcome, why)
        st = self.facts.journal.get(fact.path)
        if st is not None and st.applied and not st.in_sync and fact.path not in self.texts:
            if fact.record_sha256 is not None and st.current == fact.record_sha256:
                self._retire(st)
                st = None
            elif not self.opts.force:
                return _Part(
                    fact,
                    "drifted",
                    f"{rel} changed since vpatch wrote it (sha256 {str(fact.sha256)[:12]}, "
                    f"journal says {str(st.expected)[:12]}); --force patches the file as it is "
                    "now",
                )
        if st is not None and fact.path in self.retired:
            st = None
        prev = st.applied.get(spec.id) if st is not None else None
        if prev is not None and prev.get("edits") == dump_edits(edits):
            return _Part(fact, "already_applied", f"{rel} has the journal's hash")
        current = fact.text if fact.exists else ""
        if current is None:
            return _Part(fact, "failed", f"{rel}: no text from inspect")
        hand = (
            fact.exists
            and (st is None or not st.applied)
            and fact.record_sha256 is not None
            and fact.sha256 != fact.record_sha256
            and fact.path not in self.texts
        )
        if prev is not None and st is not None:
            # The spec changed since it was applied: rebuild, never stack on its own output.
            if st.base_text is None and not st.created:
                return _Part(
                    fact,
                    "failed",
                    f"{rel}: backup {str(st.base)[:12]} is missing or corrupt, so {spec.id}'s "
                    "earlier edits cannot be taken out",
                )
            text, why = _replay(st.base_text or "", st.applied, {spec.id: edits})
            if text is None:
                return _Part(fact, "failed", f"{rel}: {why}")
            if text == current:
                return _Part(fact, "already_applied", f"{rel} already has the spec's new edits")
            return _Part(
                fact,
                "changed",
                f"{rel}: took out the edits of the earlier {spec.id} "
                f"({str(prev.get('spec_hash'))[:8]}) and applied the new ones",
                current,
                text,
            )
        text = self.texts.get(fact.path, current)
        rw = self.rewrite(text, spec, index, rel, edits)
        if rw.status in ("anchor_missing", "ambiguous"):
            return _Part(fact, rw.status, f"{rel}: {rw.message}")
        if rw.status == "invalid":
            return _Part(fact, "failed", f"{rel}: {rw.message}")
        if rw.status == "unchanged":
            if hand and self.opts.adopt:
                return self._adoption(fact, rel, current)
            if hand and not self.opts.force:
                return _Part(
                    fact,
                    "modified",
                    f"{rel} already has the desired code, but only as an edit outside vpatch "
                    "(it differs from pip's RECORD and the journal has no entry): the next "
                    "reinstall loses it",
                )
            words = baked(res.version, fact) if st is None or not st.applied else None
            if words is not None:
                return _Part(fact, "already_applied", words)
            held = (
                f", from {', '.join(sorted(st.applied))}" if st is not None and st.applied else ""
            )
            return _Part(
                fact, "unchanged", f"{rel} already has the desired code{held} ({rw.message})"
            )
        if hand and not self.opts.force:
            why = (
                "; --adopt records only a file that already has the spec's code"
                if self.opts.adopt
                else "; --force patches it anyway"
            )
            return _Part(
                fact,
                "modified",
                f"{rel} differs from pip's RECORD and vpatch did not change it (edited by "
                f"hand?){why}",
            )
        return _Part(fact, "changed", f"{rel}: {rw.message or 'changed'}", text, rw.source)

    def _adoption(self, fact: FileFact, rel: str, current: str) -> _Part:
        """--adopt: the hand-edited file already has the spec's code; it is recorded as the
        spec's work on pip's bytes, which the commit stores as the backup rollback restores."""
        pristine = fact.record_text
        if pristine is None:
            return _Part(fact, "failed", f"{rel}: pip's bytes of it are not at hand (the wheel)")
        if sha256_text(pristine) != fact.record_sha256:
            return _Part(
                fact, "failed", f"{rel}: the wheel's bytes do not have RECORD's sha256; not adopted"
            )
        return _Part(
            fact,
            "adopt",
            f"{rel}: adopted the hand edit (it has the spec's code); rollback restores pip's bytes",
            pristine,
            current,
        )

    def _adopt(
        self, spec: PatchSpec, variant: Variant, part: _Part, res: PatchResult, plan: Plan
    ) -> None:
        """Journal the hand edit as the spec's, on pip's bytes (seeded as a backup): no write."""
        assert part.before is not None and part.after is not None
        plan.backups.append({"sha256": sha256_text(part.before), "text": part.before})
        self._record(spec, variant, part, res, sha256_text(part.after), "adopted a hand edit")

    def _stage(self, spec: PatchSpec, variant: Variant, part: _Part, res: PatchResult) -> None:
        fact = part.fact
        assert part.before is not None and part.after is not None
        w = self.writes.get(fact.path)
        if w is None:
            first = fact.text if fact.exists else None
            w = Write(fact.path, fact.rel, fact.sha256, first)
            self.writes[fact.path] = w
        w.text, w.after = part.after, sha256_text(part.after)
        self.texts[fact.path] = part.after
        self._record(spec, variant, part, res, w.after)

    def _record(
        self,
        spec: PatchSpec,
        variant: Variant,
        part: _Part,
        res: PatchResult,
        after: str,
        reason: str = "",
    ) -> None:
        """The spec's journal entry for one file, and the file in its result."""
        fact = part.fact
        assert part.before is not None and part.after is not None
        before = sha256_text(part.before) if fact.exists or part.before else None
        self.entries.append(
            protocol.apply_entry(
                spec.id,
                spec.digest,
                spec.package,
                self.facts.versions.get(spec.package),
                fact.rel,
                fact.path,
                before,
                after,
                dump_edits([e for r, es in variant.files() if r == fact.rel for e in es]),
                fact.record_sha256,
                checks_for(spec, variant, "full"),
                reason,
            )
        )
        res.files.append(
            FileChange(
                fact.path,
                before or "",
                after,
                unified_diff(fact.rel, part.before, part.after),
            )
        )


_PART_OK = frozenset({"changed", "unchanged", "already_applied", "adopt"})


@dataclass
class _Part:
    fact: FileFact
    outcome: str
    message: str
    before: str | None = None
    after: str | None = None


def plan_apply(
    specs: Sequence[PatchSpec],
    facts: HostFacts,
    opts: Options,
    rewrite: Rewriter = pure_rewriter,
) -> Plan:
    """apply: per spec the outcome, per file one write (all its specs stacked), the journal."""
    return _Apply(facts, opts, rewrite).plan(specs)


def preflight(facts: HostFacts, plan: Plan) -> tuple[str, str] | None:
    """(problem, hint) when the host cannot take the plan's writes: an unwritable state dir or
    target directory, or no room for a file, its backup and the journal. Known from inspect
    alone, so such a host costs one error line and nothing written."""
    state = facts.state
    sdir = state.get("dir", "the state dir")
    hint = "run with --sudo for a root-owned environment, or pass --state-dir DIR"
    if plan.needs_commit() and state.get("writable") is False:
        return f"cannot write vpatch's state in {sdir}: {state.get('why')}", hint
    # the state dir's share: backups and journal lines (edits and checks ride in each)
    backups = sum(len(json.dumps(e)) for e in plan.entries)
    for w in plan.writes:
        fact = next(
            (f for fs in facts.files.values() for f in fs.values() if f.path == w.path), None
        )
        size = len((w.text or "").encode())
        backups += len((w.before_text or "").encode()) + _SPACE_MARGIN
        if fact is None or w.text is None:
            continue
        folder = w.path.rsplit("/", 1)[0]
        if fact.writable is False:
            return (
                f"cannot write in {folder}: {fact.why_unwritable}",
                "remount it read-write or fix its permissions (--sudo for a root-owned env)",
            )
        # the temp file and the .pyc coexist with the old file until the rename
        if isinstance(fact.free, int) and fact.free < 2 * size + _SPACE_MARGIN:
            return (
                f"no space left for {w.rel} in {folder} ({fact.free} bytes free, "
                f"{2 * size + _SPACE_MARGIN} needed)",
                "free space on that filesystem, then run again",
            )
    free = state.get("free")
    if isinstance(free, int) and free < backups:
        return (
            f"no space left for backups in {sdir} ({free} bytes free)",
            "free space there, or pass --state-dir DIR on another filesystem",
        )
    return None


_SPACE_MARGIN = 64 * 1024  # directory entries, the .pyc, the journal lines


def plan_undo(plan: Plan, failed: set[str], reason: str) -> Plan:
    """Put back the bytes inspect saw in every file a failing spec wrote (its other specs on
    those files go too: their text was stacked on it). Every entry gets its rollback."""
    paths = {p for sid in failed for p in plan.touched.get(sid, [])}
    undo = Plan([])
    for w in plan.writes:
        if w.path not in paths:
            continue
        if w.expect is None:  # the failing spec created the file
            undo.writes.append(Write(w.path, w.rel, w.after, w.text, delete=True))
        else:
            undo.writes.append(
                Write(w.path, w.rel, w.after, w.text, restore=w.expect, after=w.expect)
            )
    for e in reversed(plan.entries):
        if e.get("action") == protocol.APPLY and e["path"] in paths:
            undo.entries.append(protocol.rollback_entry(e, e["after"], e["before"], reason))
    return undo


def plan_redo(done: Plan, facts: HostFacts) -> Plan:
    """Put back what a rollback took out, when a remaining spec fails without it: each file
    it wrote gets its bytes from before (backed up by that commit) and the dropped specs their
    apply entries again."""
    redo = Plan([])
    for w in done.writes:
        st = facts.journal[w.path]
        redo.writes.append(
            Write(w.path, w.rel, w.after, w.text, restore=st.current, after=st.current)
        )
        for e in done.entries:
            if e.get("path") != w.path or e.get("action") != protocol.ROLLBACK:
                continue
            again = {k: v for k, v in st.applied[e["spec"]].items() if k not in _META}
            again.update(before=w.after, after=st.current, reason="rollback undone")
            redo.entries.append(again)
    return redo


_META = ("ts", "txn", "user", "host")


def undone(
    plan: Plan,
    back: Plan,
    failed: dict[str, ProbeResult],
    say: Callable[[set[str], ProbeResult | None], str],
) -> bool:
    """After `back` (an undo or redo plan) was committed because `failed` specs' checks
    failed: every spec with a file it put back failed, in `say`'s words. True when every write
    of `plan` was undone."""
    paths = {w.path for w in back.writes}
    first = next(iter(failed.values()), None)
    for res in plan.results:
        if any(f.path in paths for f in res.files):
            res.outcome, res.message = "failed", say(set(failed), failed.get(res.id, first))
    return all(w.path in paths for w in plan.writes)


def verify_failed(failed: set[str], bad: ProbeResult | None) -> str:
    why = f"verify failed ({bad.name}: {bad.detail})" if bad else "verify failed"
    return f"{why}; previous bytes restored"


def still_needed(failed: set[str], bad: ProbeResult | None) -> str:
    detail = f" ({bad.name}: {bad.detail})" if bad else ""
    who = ", ".join(sorted(failed))
    return (
        f"{who} fails without it{detail}: {who} needs this spec; previous bytes restored, "
        "nothing changed"
    )


def not_done(results: Sequence[PatchResult], done: frozenset[str], why: str) -> None:
    """A commit refused, or its outcome unknown (agent killed, connection cut): no spec that
    would have written is reported as done."""
    for res in results:
        if res.outcome in done and res.files:
            res.outcome, res.message = "failed", why


# ---------------------------------------------------------------------------------------------
# verify / status


def wants_probes(res: PatchResult) -> bool:
    """verify runs the checks where code is there, or should be (a failed probe says why)."""
    return res.outcome in ("applied", "satisfied_upstream", "not_applied", "drifted")


def judge_probes(res: PatchResult, dry: bool = False) -> bool:
    """A spec in place whose probe fails is `failed`. Returns whether it counts as loaded
    (in place and every probe passed); `dry` only answers."""
    bad = next((p for p in res.probes if not p.ok), None)
    in_place = res.outcome in ("applied", "satisfied_upstream")
    if in_place and bad is not None and not dry:
        res.outcome, res.message = "failed", f"{bad.name}: {bad.detail}"
    return in_place and bad is None


def verify_spec(
    spec: PatchSpec, facts: HostFacts, rewrite: Rewriter = pure_rewriter
) -> tuple[PatchResult, Variant | None]:
    """Is the spec in place on this host, by the journal and by the code itself?"""
    res, index, variant = choose(spec, facts.versions.get(spec.package))
    if variant is None:
        return res, None
    states: list[tuple[str, str]] = []
    for rel, edits in variant.files():
        fact = facts.file(spec.package, rel)
        why = _file_problem(fact, edits, res) if fact.exists or not _adds(edits) else None
        if why:
            res.message = why
            return res, variant
        st = facts.journal.get(fact.path)
        mine = st is not None and spec.id in st.applied
        if st is not None and mine and not st.in_sync:
            what = drift_state(fact.sha256, fact.record_sha256, st.base)
            res.outcome, res.message = (
                "drifted",
                f"{rel} changed since vpatch wrote it; it is now {what}",
            )
            return res, variant
        rw = rewrite(fact.text if fact.exists and fact.text else "", spec, index, rel, edits)
        # Another spec's journaled edit (in sync) may hold this one's code too, e.g. two specs
        # adding the same list elements: that file differs from RECORD through vpatch, not by
        # hand, as apply's planner already decides (it leaves such a file unchanged).
        others = sorted(st.applied) if st is not None and st.in_sync and not mine else []
        hand = (
            not mine
            and not others
            and fact.record_sha256 is not None
            and fact.exists
            and fact.sha256 != fact.record_sha256
        )
        if rw.status == "unchanged":
            if mine:
                states.append(("applied", f"{rel} has the journal's hash and the edit"))
            elif others:
                states.append(
                    (
                        "satisfied_upstream",
                        f"{rel} already has the desired code, from {', '.join(others)}",
                    )
                )
            elif hand:
                states.append(
                    (
                        "modified",
                        f"{rel} has the desired code only as an edit outside vpatch (differs "
                        "from pip's RECORD, no journal entry); `vpatch apply --adopt` records it",
                    )
                )
            elif baked(res.version, fact) is not None:
                states.append(("applied", str(baked(res.version, fact))))
            else:
                states.append(("satisfied_upstream", f"{rel} already has the desired code"))
        elif rw.status == "changed":
            states.append(("not_applied", f"{rel} still needs the patch"))
        else:
            res.outcome = rewrite_outcome(rw.status)
            res.message = f"{rel}: {rw.message}"
            return res, variant
    for kind in ("modified", "not_applied", "applied", "satisfied_upstream"):
        if any(k == kind for k, _ in states):
            res.outcome = kind
            res.message = "; ".join(m for k, m in states if k == kind)
            break
    return res, variant


def verify_recorded(
    sid: str, facts: HostFacts, level: Level
) -> tuple[PatchResult, list[dict[str, Any]]]:
    """verify ID without its spec file: the journal's entries say which files hold the spec
    and which checks it recorded; the file hashes say whether they still do."""
    files = [(p, st) for p, st in sorted(facts.journal.items()) if sid in st.applied]
    if not files:
        res = PatchResult(sid, "?", None, "not_applied")
        res.message = f"the journal records nothing for {sid} (and no spec file was given)"
        return res, []
    first = files[0][1].applied[sid]
    res = PatchResult(sid, str(first.get("package", "?")), first.get("version"), "applied")
    checks: dict[str, dict[str, Any]] = {}
    for path, st in files:
        e = st.applied[sid]
        res.files.append(FileChange(path, str(e.get("before") or ""), str(e.get("after") or "")))
        for c in recorded_checks(e, level):
            checks.setdefault(str(c.get("name")), c)
        if not st.in_sync and res.outcome == "applied":
            now = drift_state(st.current, st.record_sha256, st.base)
            res.outcome = "drifted"
            res.message = f"{e.get('file')} changed since vpatch wrote it; it is now {now}"
    if res.outcome == "applied":
        res.message = "every file has the journal's hash (checked from the journal alone)"
    return res, list(checks.values())


def status_journal(facts: HostFacts) -> list[PatchResult]:
    """Everything the journal says vpatch applied, and whether each file still holds it."""
    out: list[PatchResult] = []
    for path, st in sorted(facts.journal.items()):
        for sid, e in st.applied.items():
            res = PatchResult(sid, str(e.get("package", "?")), e.get("version"), "applied")
            if st.in_sync:
                res.message = f"{e.get('file')}: has the journal's hash"
            elif st.reinstalled and st.other_version:
                res.outcome = "superseded"
                res.message = (
                    f"{e.get('file')}: pip's bytes of {st.package_version} (the entry was made "
                    f"on {e.get('version')}); `vpatch apply` or `vpatch rollback` clears it"
                )
            else:
                res.outcome = "drifted"
                now = drift_state(st.current, st.record_sha256, st.base)
                res.message = f"{e.get('file')}: changed since vpatch wrote it; now {now}"
            res.files = [FileChange(path, str(e.get("before") or ""), str(e.get("after") or ""))]
            out.append(res)
    return out


# ---------------------------------------------------------------------------------------------
# rollback


def plan_rollback(
    wanted: set[str] | None, facts: HostFacts, opts: Options, specs: Sequence[PatchSpec] = ()
) -> Plan:
    """Take specs out (all vpatch did when `wanted` is None): per file, base + the remaining
    specs' recorded edits; the remaining specs' recorded checks run afterwards (`checks`)."""
    out = Plan([])
    results: dict[str, PatchResult] = {}
    for path, st in sorted(facts.journal.items()):
        drop = [s for s in st.applied if wanted is None or s in wanted]
        if not drop:
            continue
        keep = {s: e for s, e in st.applied.items() if s not in drop}
        outcome, message, write = _rollback_file(st, drop, keep, opts)
        for sid in drop:
            e = st.applied[sid]
            res = results.setdefault(
                sid, PatchResult(sid, str(e.get("package", "?")), e.get("version"), "rolled_back")
            )
            if res.outcome not in ("rolled_back", "would_apply", "superseded"):
                continue  # an earlier file of this spec already failed
            if outcome != "rolled_back":
                res.outcome, res.message = outcome, message  # type: ignore[assignment]
            else:
                res.outcome = "would_apply" if opts.dry_run else "rolled_back"
                res.message = message
            if write is not None:
                res.files.append(
                    FileChange(path, st.current or "", write.after or "", _diff(st, write))
                )
        if outcome == "superseded":
            out.entries.append(
                protocol.retire_entry(path, st.other_version, st.package_version, message)
            )
            if st.other_version and st.base and st.base != st.current:
                out.gc.append(st.base)
        elif outcome == "rolled_back" and write is not None:
            out.writes.append(write)
            before = st.current
            for sid in drop:
                out.entries.append(
                    protocol.rollback_entry(st.applied[sid], before, write.after, "rollback")
                )
                before = write.after
            for sid, e in keep.items():
                out.checks.setdefault(sid, recorded_checks(e, opts.level))
                out.touched.setdefault(sid, []).append(path)
    # A spec that failed on one file writes none of its files (all or none per spec).
    bad = {
        sid
        for sid, r in results.items()
        if r.outcome not in ("rolled_back", "would_apply", "superseded")
    }
    if bad:
        bad_paths = {p for p, st in facts.journal.items() if any(s in bad for s in st.applied)}
        out.writes = [w for w in out.writes if w.path not in bad_paths]
        out.entries = [e for e in out.entries if e.get("path") not in bad_paths]
        for sid, r in results.items():
            if sid not in bad and any(f.path in bad_paths for f in r.files):
                r.outcome = "failed"
                r.message = "shares a file with a spec that cannot be rolled back; nothing written"
    for spec in specs:
        if spec.id not in results:
            version = facts.versions.get(spec.package)
            baked_note = baked_release(version)
            results[spec.id] = PatchResult(
                spec.id,
                spec.package,
                version,
                "not_applied",
                "nothing to roll back" + (f"; {baked_note}" if baked_note else ""),
            )
    for sid in wanted or ():
        if sid not in results:
            results[sid] = PatchResult(sid, "?", None, "not_applied", "nothing to roll back")
    out.results = list(results.values())
    return out


def _rollback_file(
    st: JournalFile, drop: list[str], keep: dict[str, dict[str, Any]], opts: Options
) -> tuple[str, str, Write | None]:
    """(outcome, message, write) for taking `drop` out of one file."""
    rel = str(st.applied[drop[0]].get("file") or st.path)
    if st.reinstalled:
        return (
            "superseded",
            f"{rel} is pip's bytes of {st.package_version} again: nothing to take out; "
            "journal entries retired",
            None,
        )
    if not st.in_sync and not opts.force:
        return "drifted", f"{rel} changed since vpatch wrote it; --force restores anyway", None
    if st.other_version and st.base != st.record_sha256 and not st.created:
        return (
            "failed",
            f"{rel}: the journal's pristine bytes are from "
            f"{', '.join(sorted({str(e.get('version')) for e in st.applied.values()}))}, but "
            f"{st.package_version} is installed; vpatch never writes another release's bytes",
            None,
        )
    if st.base_text is None and not st.created:
        why = st.base_error or f"backup {str(st.base)[:12]} is missing or unreadable"
        return "failed", f"{rel}: {why}", None
    if not keep:
        if st.created:
            w = Write(st.path, rel, st.current, st.current_text, delete=True)
            return "rolled_back", f"removed {rel}, which vpatch had added", w
        w = Write(st.path, rel, st.current, st.current_text, restore=st.base, after=st.base)
        if st.base == st.record_sha256:
            return "rolled_back", "restored pristine bytes (pip's RECORD)", w
        return (
            "rolled_back",
            f"restored the bytes found before vpatch (sha256 {str(st.base)[:12]}); they differ "
            "from pip's RECORD (edited before patching?)",
            w,
        )
    text, why = _replay(st.base_text or "", keep, {})
    if text is None:
        return "failed", f"{rel}: {why}", None
    w = Write(st.path, rel, st.current, st.current_text, text=text, after=sha256_text(text))
    return "rolled_back", f"re-applied {len(keep)} other spec(s): {', '.join(keep)}", w


def _diff(st: JournalFile, w: Write) -> str:
    if st.current_text is None:
        return ""
    after = w.text if w.text is not None else (st.base_text if w.restore else "")
    return unified_diff(w.rel, st.current_text, after or "")
