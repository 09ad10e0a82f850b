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
- a file that differs from RECORD with no journal entry is `modified`, never green;
- a spec whose code other specs' edits already hold is journaled as relying on them, so rolling
  them back keeps its edits (applied for real then);
- `--force` on a drifted file and `--adopt` keep hand edits apart from vpatch's edits in the
  file's base (`patcher/linemerge.py`), so every rollback keeps them;
- verify keeps apply's decision on the bytes apply wrote (docs/design.md, "Rollback stacks").
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from patcher import linemerge
from patcher.agent import protocol
from patcher.hostfacts import FileFact, HostFacts, JournalFile
from patcher.monitor import UPGRADED
from patcher.result import GOOD, FileChange, Outcome, PatchResult, ProbeResult
from patcher.rewrite import RewriteResult, Status, apply_edits
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
    """The file's diff for the report. A fleet's hosts have the same few (before, after)
    pairs, and difflib is the planner's costliest step per host: the last pairs' diffs are
    remembered (a pure function's results; texts up to 1 MiB, so the memo stays small)."""
    if len(before) + len(after) > _DIFF_MEMO_CHARS:
        return _unified_diff(rel, before, after)
    return _memo_diff(rel, before, after)


_DIFF_MEMO_CHARS = 1 << 20


def _unified_diff(rel: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{rel}",
            tofile=f"b/{rel}",
        )
    )


_memo_diff = functools.lru_cache(maxsize=16)(_unified_diff)


def dump_edits(edits: Sequence[Edit]) -> list[Any]:
    """The edits as journal entries record them (each edit's `dumped`: one dump per edit
    object, shared, so nothing here changes it)."""
    return [e.dumped for e in edits]


def load_edits(raw: Any) -> list[Edit]:
    from pydantic import TypeAdapter

    return TypeAdapter(list[Edit]).validate_python(raw)


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


@dataclass(frozen=True, kw_only=True)
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

    def copy(self) -> Plan:
        """The same decisions with results of its own: a host's run fills its results in (the
        checks' probes, an outcome that did not come true). The writes (frozen) and the
        journal entries are shared: nothing changes them once planned."""
        return Plan(
            [replace(r, files=list(r.files), probes=list(r.probes)) for r in self.results],
            list(self.writes),
            list(self.entries),
            dict(self.checks),
            dict(self.touched),
            list(self.gc),
            list(self.backups),
        )


def checks_for(spec: PatchSpec, variant: Variant | None, level: Level) -> list[dict[str, Any]]:
    """Import and probe checks for one spec. A probe imports its module itself, so a module
    already covered by a probe is not imported again at level full (each costs ~8 s of torch
    import on vLLM); the other changed modules are imported in one fresh interpreter."""
    if level == "static":
        return []
    probes = spec.probe if level == "full" else []
    covered = imported_by([p.module for p in probes])
    mods = [m for m in (variant.modules if variant is not None else []) if m not in covered]
    out: list[dict[str, Any]] = []
    if mods:
        out.append(import_check(mods))
    for p in probes:
        out.append({"name": p.name, "module": p.module, "code": p.code, "timeout": p.timeout})
    return out


def imported_by(modules: list[str]) -> set[str]:
    """Every module importing `modules` imports: each and its parent packages (`a.b.c`
    imports `a.b` and `a` first), so a changed package whose submodule a probe imports needs
    no interpreter of its own."""
    out: set[str] = set()
    for m in modules:
        parts = m.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def import_check(modules: list[str]) -> dict[str, Any]:
    """One check importing every module in one fresh interpreter (the first as the check's
    module, the others in its code)."""
    code = "".join(f"import {m}\n" for m in modules[1:])
    return {"name": "import " + ", ".join(modules), "module": modules[0], "code": code}


_DEPTH: dict[str, int] = {"static": 0, "import": 1, "full": 2}


def recorded_checks(entry: dict[str, Any], level: Level) -> list[dict[str, Any]]:
    """The checks an apply entry recorded (level full), cut to `level` and to the level the
    spec was verified at when applied (its entry's `level`; older entries: full): a check that
    never ran where the spec was applied proves nothing about another spec taken out."""
    match entry.get("level"):
        case "static" | "import" | "full" as was if _DEPTH[was] < _DEPTH[level]:
            level = was
    if level == "static":
        return []
    got = [c for c in entry.get("checks") or [] if isinstance(c, dict)]
    if level == "full":
        return got
    # import: the modules of the recorded import check, and those only a probe imported (at
    # full a probe stands in for its module's import, checks_for), in one interpreter
    mods: list[str] = []
    for c in got:
        named = [str(c.get("module"))] if c.get("module") else []
        if str(c.get("name")).startswith("import"):
            lines = str(c.get("code") or "").splitlines()
            named += [ln[len("import ") :] for ln in lines if ln.startswith("import ")]
        mods += [m for m in named if m not in mods]
    return [import_check(mods)] if mods else []


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


def rewrite_outcome(status: Status) -> Outcome:
    """The outcome a rewrite's status gives a spec, as apply reports it (matrix, wheel)."""
    if status == "changed":
        return "would_apply"
    if status == "unchanged":
        return "satisfied_upstream"
    return rewrite_problem(status)


RewriteProblem = Literal["anchor_missing", "ambiguous", "failed"]


def rewrite_problem(status: Status) -> RewriteProblem:
    """The outcome of a rewrite that did not run (anchor_missing, ambiguous, else failed)."""
    match status:
        case "anchor_missing" | "ambiguous":
            return status
        case _:
            return "failed"


def baked(version: str | None, fact: FileFact) -> str | None:
    """Words for a file of a release `vpatch wheel` built (local label `vpatch.<digest>`) that
    is pip's RECORD bytes: the spec's code in it is baked into the installed wheel, not an
    edit outside vpatch. None otherwise. Per file: `with_baked_note` says once per spec how
    to take it out."""
    if not baked_release(version) or fact.sha256 is None or fact.sha256 != fact.record_sha256:
        return None
    return f"{fact.rel} has the desired code"


def with_baked_note(message: str, package: str, version: str | None) -> str:
    """A spec's per-file words, then the baked release's note once (a 4-file spec said it 4
    times)."""
    note = baked_release(version, package)
    return f"{message}; {note}" if note else message


def baked_release(version: str | None, package: str = "") -> str:
    """How to take out what `vpatch wheel` baked into this release ("" if it is pip's own).

    A plain `pip install PKG==VER` (or uv's) is satisfied by `VER+vpatch.<digest>`, a local
    version of VER, and does nothing: only a forced reinstall, or pip's wheel pinned by its
    sha256 (vpatch.json's `pristine_wheel`), puts pip's bytes back."""
    public, _, local = (version or "").partition("+")
    if "vpatch" not in local.split("."):
        return ""
    name = package or "PACKAGE"
    return (
        f"baked into the installed wheel ({version}); `pip install --force-reinstall --no-deps "
        f"{name}=={public}` takes it out (a plain `pip install {name}=={public}` keeps it)"
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


def _file_problem(
    fact: FileFact, edits: Sequence[Edit], res: PatchResult
) -> tuple[Literal["failed", "anchor_missing"], str] | None:
    """(outcome, why) when the file cannot take the edits at all (inspect failed on it, or
    it is missing and nothing adds it); None when it can."""
    if fact.error and not (_adds(edits) and not fact.in_record):
        return "failed", f"{fact.rel} {fact.error}"
    if not fact.exists and not _adds(edits):
        return "anchor_missing", f"{fact.rel} does not exist in {res.package} {res.version}"
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
        self.staged: dict[str, list[str]] = {}  # path -> specs this plan stacked on it
        self.staged_edits: dict[tuple[str, str], tuple[PatchSpec, int, Sequence[Edit]]] = {}
        self.backups: list[dict[str, str]] = []  # new bases (hand edits kept) to store

    def plan(self, specs: Sequence[PatchSpec]) -> Plan:
        """The apply plan: each spec's outcome from its files' parts, the worst deciding."""
        out = Plan([])
        for spec in specs:
            version = self.facts.versions.get(spec.package)
            res, index, variant = choose(spec, version)
            out.results.append(res)
            if variant is None:
                self._retire_for(spec, res)
                continue
            parts = [self._part(spec, index, rel, edits, res) for rel, edits in variant.files()]
            problem = next((p for p in parts if p.problem is not None), None)
            if problem is not None and problem.problem is not None:
                res.outcome, res.message = problem.problem, problem.message
                continue
            changed = [p for p in parts if p.outcome in ("changed", "adopt", "rely")]
            if not changed:
                mine = any(p.outcome == "already_applied" for p in parts)
                res.outcome = "already_applied" if mine else "satisfied_upstream"
                res.message = "; ".join(p.message for p in parts)
                if any(p.baked for p in parts):
                    res.message = with_baked_note(res.message, spec.package, version)
                continue
            res.outcome = "would_apply" if self.opts.dry_run else "applied"
            res.message = "; ".join(p.message for p in changed if p.message)
            for p in changed:
                if p.outcome == "adopt":
                    self._adopt(spec, variant, p, res, out)
                else:
                    self._stage(spec, variant, p, res)
            out.checks[spec.id] = checks_for(spec, variant, self.opts.level)
            out.touched[spec.id] = [p.fact.path for p in changed]
        out.writes = list(self.writes.values())
        out.entries = self.entries
        out.gc = self.gc
        out.backups += self.backups
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
        """What one file of the spec comes to: a step of its work (with the text before and
        after) or a problem, which is the spec's outcome."""
        fact = self.facts.file(spec.package, rel)
        got = _file_problem(fact, edits, res)
        if got is not None:
            return _Part(fact=fact, outcome=got[0], message=got[1])
        st = self.facts.journal.get(fact.path)
        if st is not None and st.applied and not st.in_sync and fact.path not in self.texts:
            if fact.record_sha256 is not None and st.current == fact.record_sha256:
                self._retire(st)
                st = None
            elif not self.opts.force:
                return _Part(
                    fact=fact,
                    outcome="drifted",
                    message=f"{rel} changed since vpatch wrote it (sha256 {str(fact.sha256)[:12]}, "
                    f"journal says {str(st.expected)[:12]}); --force patches the file as it is "
                    "now",
                )
            else:
                return self._force_drifted(spec, index, rel, edits, fact, st)
        if st is not None and fact.path in self.retired:
            st = None
        prev = st.applied.get(spec.id) if st is not None else None
        if prev is not None and prev.get("edits") == dump_edits(edits):
            return _Part(
                fact=fact, outcome="already_applied", message=f"{rel} has the journal's hash"
            )
        current = fact.text if fact.exists else ""
        if current is None:
            return _Part(fact=fact, outcome="failed", message=f"{rel}: no text from inspect")
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
                    fact=fact,
                    outcome="failed",
                    message=f"{rel}: backup {str(st.base)[:12]} is missing or corrupt, so "
                    f"{spec.id}'s earlier edits cannot be taken out",
                )
            text, why = _replay(st.base_text or "", st.applied, {spec.id: edits})
            if text is None:
                return _Part(fact=fact, outcome="failed", message=f"{rel}: {why}")
            if text == current:
                return _Part(
                    fact=fact,
                    outcome="already_applied",
                    message=f"{rel} already has the spec's new edits",
                )
            return _Part(
                fact=fact,
                outcome="changed",
                message=f"{rel}: took out the edits of the earlier {spec.id} "
                f"({str(prev.get('spec_hash'))[:8]}) and applied the new ones",
                before=current,
                after=text,
            )
        text = self.texts.get(fact.path, current)
        rw = self.rewrite(text, spec, index, rel, edits)
        if rw.status in ("anchor_missing", "ambiguous"):
            return _Part(fact=fact, outcome=rw.status, message=f"{rel}: {rw.message}")
        if rw.status == "invalid":
            return _Part(fact=fact, outcome="failed", message=f"{rel}: {rw.message}")
        if rw.status == "unchanged":
            if hand and self.opts.adopt:
                return self._adoption(spec, index, rel, edits, fact, current)
            if _adds(edits) and fact.exists and not fact.in_record and fact.path not in self.texts:
                if st is None or not st.applied:
                    return self._added_by_hand(fact, rel, current)
            if hand and not self.opts.force:
                return _Part(
                    fact=fact,
                    outcome="modified",
                    message=f"{rel} already has the desired code, but only as an edit outside "
                    "vpatch (it differs from pip's RECORD and the journal has no entry): the next "
                    "reinstall loses it",
                )
            words = baked(res.version, fact) if st is None or not st.applied else None
            if words is not None and fact.path not in self.texts:
                return _Part(fact=fact, outcome="already_applied", message=words, baked=True)
            holders = self._holders(fact.path, st)
            if holders and not self._base_has(spec, index, rel, edits, fact, st):
                return _Part(
                    fact=fact,
                    outcome="rely",
                    message=f"{rel} already has the desired code, from {', '.join(holders)}: "
                    f"recorded as relying on it (rolling {', '.join(holders)} back keeps this "
                    "spec's edits, applied for real)",
                    before=text,
                    after=text,
                    relies=holders,
                )
            return _Part(
                fact=fact,
                outcome="unchanged",
                message=f"{rel} already has the desired code ({rw.message})",
            )
        if hand and not self.opts.force:
            why = (
                "; --adopt records only a file that already has the spec's code"
                if self.opts.adopt
                else "; --force patches it anyway"
            )
            return _Part(
                fact=fact,
                outcome="modified",
                message=f"{rel} differs from pip's RECORD and vpatch did not change it (edited by "
                f"hand?{hand_lines(fact)}){why}",
            )
        undone = self._undoes(fact, st, rw.source, (spec, index, edits))
        if undone:
            return _Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: this spec's edit takes out the code of {', '.join(undone)} "
                "(stacked before it on this file); apply one of them, or roll the other back first",
            )
        return _Part(
            fact=fact,
            outcome="changed",
            message=f"{rel}: {rw.message or 'changed'}",
            before=text,
            after=rw.source,
        )

    def _undoes(
        self,
        fact: FileFact,
        st: JournalFile | None,
        after: str,
        mine: tuple[PatchSpec, int, Sequence[Edit]],
    ) -> list[str]:
        """The specs already on the file (journaled in sync, or stacked by this plan) whose
        effect this spec's edit (`mine`, giving `after`) takes out: a stack verify could never
        call applied for both. A holder whose rewrite would change `after` again is checked
        for real: its code is out when the file without it, with this edit, is `after` too
        (an insert next to the same anchor only moved it: not a conflict)."""
        holders = self._holders(fact.path, st)
        out: list[str] = []
        for sid in holders:
            if self._edit(fact, st, sid, after) != "changed":
                continue
            text: str | None = self._base_for(fact, st)
            for other in holders:
                if text is None or other == sid:
                    continue
                text = self._edit_text(fact, st, other, text)
            spec, index, edits = mine
            if (
                text is not None
                and self.rewrite(text, spec, index, fact.rel, edits).source == after
            ):
                out.append(sid)
        return out

    def _base_for(self, fact: FileFact, st: JournalFile | None) -> str | None:
        """The text the holders' edits were stacked on (see _base_has)."""
        if st is not None and st.applied and st.in_sync:
            return st.base_text if not st.created else ""
        return fact.text if fact.exists else ""

    def _edit(self, fact: FileFact, st: JournalFile | None, sid: str, text: str) -> str:
        """The status of holder `sid`'s edits on `text`."""
        rw = self._holder_rewrite(fact, st, sid, text)
        return rw.status if rw is not None else "unchanged"

    def _edit_text(self, fact: FileFact, st: JournalFile | None, sid: str, text: str) -> str | None:
        """`text` with holder `sid`'s edits applied (None: they do not apply there)."""
        rw = self._holder_rewrite(fact, st, sid, text)
        if rw is None:
            return text
        return rw.source if rw.status in ("changed", "unchanged") else None

    def _holder_rewrite(
        self, fact: FileFact, st: JournalFile | None, sid: str, text: str
    ) -> RewriteResult | None:
        """Holder `sid`'s edits run on `text`: staged by this plan (the cached rewriter) or
        recorded in the journal; None for a spec that is neither."""
        got = self.staged_edits.get((fact.path, sid))
        if got is not None:
            spec, index, edits = got
            return self.rewrite(text, spec, index, fact.rel, edits)
        if st is not None and sid in st.applied:
            return apply_edits(text, load_edits(st.applied[sid].get("edits") or []))
        return None

    def _holders(self, path: str, st: JournalFile | None) -> list[str]:
        """The specs whose edits are in the file as this spec meets it: journaled (in sync)
        and stacked by this plan, in order."""
        journaled = list(st.applied) if st is not None and st.in_sync else []
        staged = self.staged.get(path, [])
        return [s for s in journaled if s not in staged] + staged

    def _base_has(
        self,
        spec: PatchSpec,
        index: int,
        rel: str,
        edits: Sequence[Edit],
        fact: FileFact,
        st: JournalFile | None,
    ) -> bool:
        """Does the file hold the spec's code without any other spec's edits (upstream has
        it)? The base when the journal has one, else the bytes inspect saw (this plan's
        stacking aside). An unknown base counts as no: relying costs a journal line, a wrong
        `satisfied_upstream` costs the spec's effect at the next rollback."""
        base = self._base_for(fact, st)
        if base is None:
            return False
        return self.rewrite(base, spec, index, rel, edits).status == "unchanged"

    def _force_drifted(
        self,
        spec: PatchSpec,
        index: int,
        rel: str,
        edits: Sequence[Edit],
        fact: FileFact,
        st: JournalFile,
    ) -> _Part:
        """--force on a file changed since vpatch wrote it: re-patch from the bytes it has
        now. The hand edit is kept apart from vpatch's edits (`linemerge`) as the file's new
        base, so every later rollback keeps it; where it changed vpatch's own lines no base
        can keep it, and the file is refused rather than recorded as what it is not."""
        current = fact.text
        undo = "`vpatch rollback --force` restores the journal's base, then apply again"
        if st.created or st.other_version:
            why = "vpatch created it" if st.created else "its entries are of another release"
            return _Part(
                fact=fact,
                outcome="failed",
                message=f"{rel} changed since vpatch wrote it and {why}; {undo}",
            )
        if current is None or st.base_text is None:
            got = st.base_error or f"backup {str(st.base)[:12]} is missing or unreadable"
            return _Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: {got}; the hand edit cannot be kept apart",
            )
        wrote, why = _replay(st.base_text, st.applied, {})
        if wrote is None or sha256_text(wrote) != st.expected:
            return _Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: the journal's edits no longer give the bytes vpatch wrote "
                f"({why or 'other bytes'}); {undo}",
            )
        base, conflicts = linemerge.merge(wrote, current, st.base_text)
        if base is None:
            return _Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: the hand edit changed vpatch's own lines ({', '.join(conflicts)} "
                f"of what vpatch wrote), so no base keeps it apart; {undo}",
            )
        mine: dict[str, Sequence[Edit]] = {spec.id: edits} if spec.id in st.applied else {}
        text, why = _replay(base, st.applied, mine)
        if text is not None and not mine:
            rw = self.rewrite(text, spec, index, rel, edits)
            if rw.status not in ("changed", "unchanged"):
                return _Part(
                    fact=fact, outcome=rewrite_problem(rw.status), message=f"{rel}: {rw.message}"
                )
            text = rw.source
        if text is None:
            return _Part(fact=fact, outcome="failed", message=f"{rel}: {why}")
        kept = linemerge.changed_lines(st.base_text, base) or "none"
        return _Part(
            fact=fact,
            outcome="changed",
            message=f"{rel}: re-patched from the bytes it has now; the hand edit ({kept}) is kept "
            "in the base every rollback restores",
            before=current,
            after=text,
            base=base,
        )

    def _added_by_hand(self, fact: FileFact, rel: str, current: str) -> _Part:
        """add_file meets the spec's module already there, not pip's and not journaled: it
        was added outside vpatch. --adopt records it as created by the spec (rollback then
        removes it); otherwise it is `modified`, never satisfied by upstream."""
        if not self.opts.adopt:
            return _Part(
                fact=fact,
                outcome="modified",
                message=f"{rel} has the spec's content but is not a file of the package and the "
                "journal has no entry (added by hand?); `vpatch apply --adopt` records it as this "
                "spec's, so rollback removes it",
            )
        return _Part(
            fact=fact,
            outcome="adopt",
            message=f"{rel}: adopted the module added by hand (it has the spec's content); "
            "rollback removes it",
            before="",
            after=current,
            created=True,
        )

    def _adoption(
        self,
        spec: PatchSpec,
        index: int,
        rel: str,
        edits: Sequence[Edit],
        fact: FileFact,
        current: str,
    ) -> _Part:
        """--adopt: the hand-edited file already has the spec's code. Exactly the spec's
        edits are recorded as its work: on pip's bytes (which the commit stores as the backup
        rollback restores) when the file is pip's + the spec's edits, else on pip's bytes with
        the other hand edits kept (`linemerge`), which stay hand edits, named, not the spec's."""
        pristine = fact.record_text
        if pristine is None:
            return _Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: pip's bytes of it are not at hand (the wheel)",
            )
        if sha256_text(pristine) != fact.record_sha256:
            return _Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: the wheel's bytes do not have RECORD's sha256; not adopted",
            )
        rw = self.rewrite(pristine, spec, index, rel, edits)
        if rw.status not in ("changed", "unchanged"):
            return _Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: on pip's bytes: {rw.message}; not adopted",
            )
        if rw.status == "unchanged":
            return _Part(
                fact=fact,
                outcome="unchanged",
                message=f"{rel}: pip's bytes already have the desired code; the hand edits in the "
                "file are not the spec's, nothing adopted",
            )
        if rw.source == current:
            return _Part(
                fact=fact,
                outcome="adopt",
                message=f"{rel}: adopted the hand edit (it is exactly the spec's edits); rollback "
                "restores pip's bytes",
                before=pristine,
                after=current,
            )
        base, conflicts = linemerge.merge(rw.source, current, pristine)
        if base is None or self.rewrite(base, spec, index, rel, edits).source != current:
            where = ", ".join(conflicts) or "the spec's lines"
            return _Part(
                fact=fact,
                outcome="modified",
                message=f"{rel} has the spec's code, but the hand edit also changed the spec's own "
                f"lines ({where}); not adopted: --adopt records exactly the spec's edits",
            )
        others = linemerge.changed_lines(pristine, base)
        return _Part(
            fact=fact,
            outcome="adopt",
            message=f"{rel}: adopted the spec's edits only; the other differences from pip's bytes "
            f"({others}) stay hand edits (modified), kept in the base rollback restores",
            before=base,
            after=current,
        )

    def _adopt(
        self, spec: PatchSpec, variant: Variant, part: _Part, res: PatchResult, plan: Plan
    ) -> None:
        """Journal the hand edit as the spec's, on its base (seeded as a backup; none for a
        module added by hand, which the entry records as created): no write."""
        assert part.before is not None and part.after is not None
        if not part.created:
            plan.backups.append({"sha256": sha256_text(part.before), "text": part.before})
        self._record(spec, variant, part, res, sha256_text(part.after), "adopted a hand edit")

    def _stage(self, spec: PatchSpec, variant: Variant, part: _Part, res: PatchResult) -> None:
        fact = part.fact
        assert part.before is not None and part.after is not None
        self.staged.setdefault(fact.path, []).append(spec.id)
        index = next(i for i, v in enumerate(spec.variant) if v is variant)
        edits = [e for r, es in variant.files() if r == fact.rel for e in es]
        self.staged_edits[(fact.path, spec.id)] = (spec, index, edits)
        reason = f"relies on {', '.join(part.relies)}" if part.relies else ""
        if part.base is not None:
            reason = "re-patched with --force; hand edit kept in the base"
            if sha256_text(part.base) != self.facts.journal[fact.path].base:
                self.backups.append({"sha256": sha256_text(part.base), "text": part.base})
        if part.before == part.after and fact.path not in self.writes:
            # the bytes already are the spec's (it relies on another spec, or --force found
            # the spec's code in place): the journal says so, nothing is written
            self._record(spec, variant, part, res, sha256_text(part.after), reason)
            return
        w = self.writes.get(fact.path)
        if w is None:
            first = fact.text if fact.exists else None
            w = Write(path=fact.path, rel=fact.rel, expect=fact.sha256, before_text=first)
        after = sha256_text(part.after)
        # a later spec on the same file writes over the earlier one's text
        self.writes[fact.path] = replace(w, text=part.after, after=after)
        self.texts[fact.path] = part.after
        self._record(spec, variant, part, res, after, reason)

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
        before = (
            sha256_text(part.before) if (fact.exists or part.before) and not part.created else None
        )
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
                part.relies,
                self.opts.level,
                sha256_text(part.base) if part.base is not None else None,
                variant.versions,
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


# What one file of a spec comes to in apply's plan: a step of the spec's work (written,
# already there, adopted, relying on another spec), or a problem, which is the spec's outcome.
Step = Literal["changed", "unchanged", "already_applied", "adopt", "rely"]
Problem = Literal["failed", "anchor_missing", "ambiguous", "drifted", "modified"]


@dataclass(frozen=True, kw_only=True)
class _Part:
    fact: FileFact
    outcome: Step | Problem
    message: str
    before: str | None = None
    after: str | None = None
    relies: list[str] = field(default_factory=list)  # "rely": the specs holding its code
    base: str | None = None  # the file's new base (vpatch's edits out, hand edits in)
    created: bool = False  # --adopt of a module added by hand: journaled as created
    baked: bool = False  # already_applied: pip's bytes of a wheel `vpatch wheel` built

    @property
    def problem(self) -> Problem | None:
        """The spec's outcome when this file stops it; None for a step of its work."""
        match self.outcome:
            case "failed" | "anchor_missing" | "ambiguous" | "drifted" | "modified":
                return self.outcome
            case _:
                return None


def hand_lines(fact: FileFact) -> str:
    """`: lines ...` naming how a hand-edited file differs from pip's bytes, when those are
    at hand (`record_text`); "" otherwise."""
    if fact.record_text is None or fact.text is None:
        return ""
    return "; differs from pip's bytes in " + linemerge.changed_lines(fact.record_text, fact.text)


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
        why = str(state.get("why"))
        return f"cannot write vpatch's state in {sdir}: {why}", read_only_hint(why) or hint
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
                read_only_hint(str(fact.why_unwritable))
                or "remount it read-write or fix its permissions (--sudo for a root-owned env)",
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


def read_only_hint(why: str) -> str:
    """The hint for a write refused by a read-only filesystem ("" for any other reason): no
    user, sudo included, can write there, so the only fixes are where the env is built or
    how it is mounted. Reads (status, verify, ensure/exec with every patch in place) work."""
    if "Read-only file system" not in why:
        return ""
    return (
        "the environment is mounted read-only: apply the patches where it is built "
        "(e.g. `vpatch apply` in the image build), or mount it read-write"
    )


def plan_undo(plan: Plan, failed: set[str], reason: str) -> Plan:
    """Put back the bytes inspect saw in every file a failing spec wrote (its other specs on
    those files go too: their text was stacked on it). Every entry gets its rollback."""
    paths = {p for sid in failed for p in plan.touched.get(sid, [])}
    undo = Plan([])
    for w in plan.writes:
        if w.path not in paths:
            continue
        if w.expect is None:  # the failing spec created the file
            undo.writes.append(
                Write(path=w.path, rel=w.rel, expect=w.after, before_text=w.text, delete=True)
            )
        else:
            undo.writes.append(_put_back(w, w.expect))
    for e in reversed(plan.entries):
        if e.get("action") == protocol.APPLY and e["path"] in paths:
            # a journal-only entry (--adopt, relies_on) is taken back by its rollback alone
            undo.entries.append(protocol.rollback_entry(e, e["after"], e["before"], reason))
    return undo


def _put_back(w: Write, backup: str | None) -> Write:
    """The write that puts the backup `backup` (its sha256) back over what `w` wrote."""
    return Write(
        path=w.path, rel=w.rel, expect=w.after, before_text=w.text, restore=backup, after=backup
    )


def plan_redo(done: Plan, facts: HostFacts) -> Plan:
    """Put back what a rollback took out, when a remaining spec fails without it: each file
    it wrote gets its bytes from before (backed up by that commit) and the dropped specs their
    apply entries again."""
    redo = Plan([])
    for w in done.writes:
        st = facts.journal[w.path]
        redo.writes.append(_put_back(w, st.current))
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
    paths = {w.path for w in back.writes} | {str(e.get("path")) for e in back.entries}
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


def could_not_check(plan: Plan, failed: dict[str, ProbeResult]) -> None:
    """A kept spec's check failed after a rollback AND with the rolled-back specs in place:
    it cannot tell anything about them here (an env that cannot import, say), so it is named
    as not checked, never as a dependency."""
    said = "; ".join(
        f"{sid}: could not check here ({p.name}: {p.detail}; it fails with this spec in place too)"
        for sid, p in sorted(failed.items())
    )
    for res in plan.results:
        if res.outcome == "rolled_back":
            res.message += f"; {said}"


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
    """(result, variant): is the spec in place on this host, by the journal and by the code
    itself? The variant is the one whose checks verify runs (None: no variant applies)."""
    res, index, variant = choose(spec, facts.versions.get(spec.package))
    if variant is None:
        return res, None
    states: list[tuple[str, str]] = []
    in_wheel = False  # a file's code is baked into the installed wheel: said once, at the end
    for rel, edits in variant.files():
        fact = facts.file(spec.package, rel)
        got = _file_problem(fact, edits, res) if fact.exists or not _adds(edits) else None
        if got is not None:
            res.outcome, res.message = got
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
        same = mine and st is not None and st.applied[spec.id].get("edits") == dump_edits(edits)
        if same and st is not None and rw.status != "unchanged" and not _taken_out(st, spec.id):
            # The bytes are what apply wrote with these very edits, and specs stacked after
            # this one moved its anchor (an `occurrence` counted again, an insert next to the
            # same statement): apply's decision stands. Only where the file without the spec
            # is the file now (a later spec took its code out) is it not in place.
            # The edit run again on this file is not the evidence here, so its words ("there
            # is no occurrence 2") are not shown beside `applied`.
            states.append(
                (
                    "applied",
                    f"{rel} has the journal's hash and the spec's edits (specs stacked after "
                    "it moved its anchor: apply's record decides)",
                )
            )
            continue
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
                in_wheel = True
            else:
                states.append(("satisfied_upstream", f"{rel} already has the desired code"))
        elif rw.status == "changed" and hand:
            states.append(
                (
                    "modified",
                    f"{rel} differs from pip's RECORD without the spec's code and the journal "
                    f"has no entry (edited by hand{hand_lines(fact)}); `vpatch diff` shows the "
                    "edit, `vpatch apply --force` patches it anyway",
                )
            )
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
    if in_wheel and res.outcome == "applied":
        res.message = with_baked_note(res.message, spec.package, res.version)
    return res, variant


def _taken_out(st: JournalFile, sid: str) -> bool:
    """Has the file, as vpatch wrote it, no trace of `sid`'s edits (base + the other specs'
    edits gives the same bytes)? Unknown base: no."""
    if st.base_text is None and not st.created:
        return False
    without, _why = _replay(st.base_text or "", st.applied, {sid: []})
    return without is not None and sha256_text(without) == st.current


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


def _still_fits(st: JournalFile, entry: dict[str, Any]) -> bool:
    """Would the entry's recorded edits change the file as it is now, on a release its
    variant's range admits (a patch an upgrade wiped, not one the release made needless or
    the spec does not cover)? Unknown text or version: no (said as superseded)."""
    if st.current_text is None:
        return False
    versions = entry.get("versions")
    if isinstance(versions, str):
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            if not SpecifierSet(versions).contains(Version(str(st.package_version)), True):
                return False
        except (InvalidSpecifier, InvalidVersion):
            return False
    try:
        edits = load_edits(entry.get("edits") or [])
    except ValueError:
        return False
    return bool(edits) and apply_edits(st.current_text, edits).status == "changed"


def _upstream_has(st: JournalFile, entry: dict[str, Any]) -> bool:
    """Does the file as it is now (another release's) already hold the entry's edits? Unknown
    text or edits: no."""
    if st.current_text is None:
        return False
    try:
        edits = load_edits(entry.get("edits") or [])
    except ValueError:
        return False
    return bool(edits) and apply_edits(st.current_text, edits).status == "unchanged"


def status_journal(facts: HostFacts) -> list[PatchResult]:
    """One result per spec the journal says vpatch applied, and whether each file still holds
    it: all its files in one result (a 4-file spec is one spec, not four), each file shown
    as the journal's base -> what vpatch last wrote there (after a partial rollback, the bytes
    the rollback wrote, not the hash of the spec's own apply)."""
    out: dict[str, PatchResult] = {}
    words: dict[str, list[tuple[Outcome, str]]] = {}
    for path, st in sorted(facts.journal.items()):
        for sid, e in st.applied.items():
            res = out.setdefault(
                sid, PatchResult(sid, str(e.get("package", "?")), e.get("version"), "applied")
            )
            rel = str(e.get("file"))
            outcome: Outcome
            if st.in_sync:
                outcome, message = "applied", f"{rel}: has the journal's hash"
            elif st.reinstalled and st.other_version and _still_fits(st, e):
                outcome, res.version = "drifted", st.package_version
                message = (
                    f"{UPGRADED}{rel}: pip's bytes of {st.package_version} (upgraded from "
                    f"{e.get('version')}): the patch is gone and its edits still fit; "
                    "`vpatch apply` patches it again"
                )
            elif st.reinstalled and st.other_version and _upstream_has(st, e):
                outcome = "superseded"
                message = (
                    f"{rel}: pip's bytes of {st.package_version} already hold the spec's code "
                    f"(the entry was made on {e.get('version')}); `vpatch apply` or "
                    "`vpatch rollback` clears the entry"
                )
            elif st.reinstalled and st.other_version:
                # Gone after an upgrade, and the edits recorded for the old release do not
                # say whether the spec has a variant for the new one: `status SPEC` does (it
                # says drifted there), so this is not a green `superseded` either.
                outcome, res.version = "drifted", st.package_version
                message = (
                    f"{UPGRADED}{rel}: pip's bytes of {st.package_version} (the entry was made "
                    f"on {e.get('version')}): the patch is gone; `vpatch apply SPEC` patches "
                    "the new release if a variant covers it, `vpatch rollback ID` clears the "
                    "entry if none does"
                )
            else:
                now = drift_state(st.current, st.record_sha256, st.base)
                outcome, message = "drifted", f"{rel}: changed since vpatch wrote it; now {now}"
            words.setdefault(sid, []).append((outcome, message))
            before = st.base or ("" if st.created else str(e.get("before") or ""))
            if message.startswith(UPGRADED):  # the new release's bytes, not the old ones
                before, after = str(st.record_sha256 or ""), str(st.current or "")
            else:
                after = str(st.expected or "")
            res.files.append(FileChange(path, str(before), after))
    for sid, res in out.items():
        said = words[sid]
        worst: Outcome = next((o for o in _STATUS_WORST if any(x == o for x, _ in said)), "applied")
        res.outcome = worst
        if worst == "applied" and len(said) > 1:
            res.message = f"all {len(said)} files have the journal's hash"
        else:
            res.message = "; ".join(m for o, m in said if o == worst)
    return list(out.values())


_STATUS_WORST: tuple[Outcome, ...] = ("drifted", "superseded")


# ---------------------------------------------------------------------------------------------
# rollback


def plan_rollback(
    wanted: set[str] | None, facts: HostFacts, opts: Options, specs: Sequence[PatchSpec] = ()
) -> Plan:
    """The rollback plan: specs taken out (all vpatch did when `wanted` is None), per file
    base + the remaining specs' recorded edits; the remaining specs' recorded checks run
    afterwards (`checks`)."""
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
            if res.outcome not in _ROLLING:
                continue  # an earlier file of this spec already failed
            if outcome != "rolled_back":
                res.outcome, res.message = outcome, message
            elif opts.dry_run:
                res.outcome, res.message = "would_roll_back", _would(message)
            else:
                res.outcome = "rolled_back"
                # per file what it took (a multi-file spec: each different word once)
                if message not in res.message.split("; "):
                    res.message = f"{res.message}; {message}" if res.message else message
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
    bad = {sid for sid, r in results.items() if r.outcome not in _ROLLING}
    if bad:
        bad_paths = {p for p, st in facts.journal.items() if any(s in bad for s in st.applied)}
        out.writes = [w for w in out.writes if w.path not in bad_paths]
        out.entries = [e for e in out.entries if e.get("path") not in bad_paths]
        for sid, r in results.items():
            if sid not in bad and any(f.path in bad_paths for f in r.files):
                r.outcome = "failed"
                r.message = "shares a file with a spec that cannot be rolled back; nothing written"
    for path, ids in sorted(facts.orphaned.items()):
        drop = [s for s in ids if wanted is None or s in wanted]
        if not drop:
            continue
        why = "its package is not installed any more: journal entries retired"
        if opts.dry_run:
            why = "its package is not installed any more: its journal entries would be retired"
        else:
            out.entries.append(protocol.retire_entry(path, False, None, why))
        for sid in drop:
            results.setdefault(sid, PatchResult(sid, "?", None, "superseded", why))
    for spec in specs:
        if spec.id not in results:
            version = facts.versions.get(spec.package)
            baked_note = baked_release(version, spec.package)
            results[spec.id] = PatchResult(spec.id, spec.package, version, "not_applied")
            results[spec.id].message = "nothing to roll back"
            if baked_note:
                results[spec.id].outcome = "failed"
                results[spec.id].message = _baked_rollback(baked_note)
    for package, version, sid in facts.baked:
        if sid not in results and (wanted is None or sid in wanted):
            note = baked_release(version, package)
            results[sid] = PatchResult(sid, package, version, "failed", _baked_rollback(note))
    for sid in wanted or ():
        if sid not in results:
            results[sid] = PatchResult(sid, "?", None, "not_applied", "nothing to roll back")
    out.results = list(results.values())
    return out


_ROLLING = ("rolled_back", "would_roll_back", "superseded")


def _baked_rollback(note: str) -> str:
    """A spec baked into the installed wheel: rollback refuses to say `rolled_back` or
    `nothing to roll back` (the code is there, and the journal has nothing of it)."""
    return f"not rolled back: {note}; vpatch's journal has nothing of it to undo"


def _would(message: str) -> str:
    """A rollback's message as a dry run says it: what it would do, not what it did."""
    for done, would in (("restored ", "would restore "), ("removed ", "would remove ")):
        if message.startswith(done):
            return would + message[len(done) :]
    if message.startswith("re-applied "):
        return "would re-apply " + message[len("re-applied ") :]
    return message


RollbackOutcome = Literal["rolled_back", "superseded", "drifted", "failed"]


def _rollback_file(
    st: JournalFile, drop: list[str], keep: dict[str, dict[str, Any]], opts: Options
) -> tuple[RollbackOutcome, str, Write | None]:
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
            w = Write(
                path=st.path, rel=rel, expect=st.current, before_text=st.current_text, delete=True
            )
            return "rolled_back", f"removed {rel}, which vpatch had added", w
        w = Write(
            path=st.path,
            rel=rel,
            expect=st.current,
            before_text=st.current_text,
            restore=st.base,
            after=st.base,
        )
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
    w = Write(
        path=st.path,
        rel=rel,
        expect=st.current,
        before_text=st.current_text,
        text=text,
        after=sha256_text(text),
    )
    said = f"re-applied {len(keep)} other spec(s): {', '.join(keep)}"
    relied = sorted(s for s, e in keep.items() if set(e.get("relies_on") or ()) & set(drop))
    if relied:
        said += (
            f"; {', '.join(relied)} relied on {', '.join(drop)} for its code: its edits are "
            "kept, now applied for real"
        )
    if st.base != st.record_sha256 and not st.created:
        said += f"; the hand edits in the base (sha256 {str(st.base)[:12]}) are kept"
    return "rolled_back", said, w


def _diff(st: JournalFile, w: Write) -> str:
    if st.current_text is None:
        return ""
    after = w.text if w.text is not None else (st.base_text if w.restore else "")
    return unified_diff(w.rel, st.current_text, after or "")


# ---------------------------------------------------------------------------------------------
# ensure: apply, then (`--level`) a verify of what was already in place

IN_PLACE: tuple[Outcome, ...] = ("already_applied", "satisfied_upstream")


def recheck_specs(specs: Sequence[PatchSpec], applied: Sequence[PatchResult]) -> list[PatchSpec]:
    """The specs ensure's `--level` verifies again: those apply found in place without a
    write (what apply wrote, apply's own checks already judged)."""
    in_place = {r.id for r in applied if r.outcome in IN_PLACE}
    return [s for s in specs if s.id in in_place]


def recheck(applied: Sequence[PatchResult], verified: Sequence[PatchResult]) -> list[PatchResult]:
    """The results ensure reports: apply's, each re-checked spec with verify's probes, and
    verify's outcome where it is not good or a probe failed (the check decides, not apply)."""
    by_id = {v.id: v for v in verified}
    out: list[PatchResult] = []
    for res in applied:
        v = by_id.get(res.id)
        if v is None:
            out.append(res)
        elif v.outcome not in GOOD["verify"] or not all(p.ok for p in v.probes):
            out.append(replace(res, outcome=v.outcome, message=v.message, probes=v.probes))
        else:
            out.append(replace(res, probes=v.probes))
    return out


# ---------------------------------------------------------------------------------------------
# matrix: one release of a package, with no host (the file as the release's wheel ships it)

MatrixOutcome = Literal[
    "would_apply",
    "satisfied_upstream",
    "anchor_missing",
    "ambiguous",
    "not_covered",
    "no_file",
    "failed",  # the release could not be examined (download, corrupt wheel, unparsable file)
]
# A release with one of these means the spec does not fit it: `vpatch matrix` exits 1.
MATRIX_FAILING: frozenset[MatrixOutcome] = frozenset(
    {"anchor_missing", "ambiguous", "not_covered", "failed"}
)


@dataclass(frozen=True)
class Verdict:
    """A release's answer in `vpatch matrix`: the `[[variant]]` chosen (None: none covers
    it), the outcome and why."""

    variant: int | None
    outcome: MatrixOutcome
    message: str


def matrix_choose(spec: PatchSpec, version: str) -> tuple[int, Variant] | Verdict:
    """(index, variant) whose files must be read, or the final verdict when no file is
    needed. Variant choice is `choose`'s, as on a host."""
    res, index, variant = choose(spec, version)
    if variant is not None:
        return index, variant
    if res.outcome == "satisfied_upstream":
        return Verdict(index, "satisfied_upstream", res.message)
    ranges = "; ".join(v.versions for v in spec.variant)
    return Verdict(None, "not_covered", f"in no variant's range ({ranges})")


def judge_release(index: int, variant: Variant, files: dict[str, bytes | None]) -> Verdict:
    """The verdict of the variant's edits on the release's files (None: not in the wheel), as
    `vpatch apply --dry-run` would say it: `rewrite_outcome`, the worst file deciding."""
    verdicts: list[tuple[Outcome, str]] = []
    for rel, edits in variant.files():
        data = files.get(rel)
        if data is None and not _adds(edits):
            return Verdict(index, "no_file", f"{rel} is not in the wheel")
        try:
            text = (data or b"").decode("utf-8")
        except UnicodeDecodeError:
            return Verdict(index, "failed", f"{rel} is not UTF-8 text")
        rw = apply_edits(text, edits)
        if rw.status not in ("changed", "unchanged"):
            return Verdict(index, rewrite_problem(rw.status), f"{rel}: {rw.message}")
        verdicts.append((rewrite_outcome(rw.status), f"{rel}: {rw.message}"))
    changed = any(v == "would_apply" for v, _ in verdicts)
    message = "; ".join(m for _, m in verdicts)
    return Verdict(index, "would_apply" if changed else "satisfied_upstream", message)
