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
  file's base (`patcher/plan/linemerge.py`), so every rollback keeps them;
- verify keeps apply's decision on the bytes apply wrote (docs/design.md, "Rollback stacks").
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from patcher.plan import fastdiff
from patcher.plan.hostfacts import FileFact
from patcher.result import Outcome, PatchResult
from patcher.rewrite import RewriteResult, Status, apply_edits
from patcher.specs.model import Edit, PatchSpec, Variant, edits_from_json

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
    metrics_profile: str = "vllm"  # verify: whose counter names (serving.model.PROFILES)
    adopt: bool = False  # apply: record a hand edit that already has the spec's code as applied


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def unified_diff(rel: str, before: str, after: str) -> str:
    """The file's diff for the report. A fleet's hosts have the same few (before, after)
    pairs, and the diff is the planner's costliest step per host: the last pairs' diffs are
    remembered (a pure function's results; texts up to 1 MiB, so the memo stays small)."""
    if len(before) + len(after) > _DIFF_MEMO_CHARS:
        return _unified_diff(rel, before, after)
    return _memo_diff(rel, before, after)


_DIFF_MEMO_CHARS = 1 << 20


def _unified_diff(rel: str, before: str, after: str) -> str:
    return "".join(
        fastdiff.unified_diff(
            fastdiff.split_lines(before),
            fastdiff.split_lines(after),
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
    return edits_from_json(raw)  # validated: a journal is the host's word


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


def file_problem(
    fact: FileFact, edits: Sequence[Edit], res: PatchResult
) -> tuple[Literal["failed", "anchor_missing"], str] | None:
    """(outcome, why) when the file cannot take the edits at all (inspect failed on it, or
    it is missing and nothing adds it); None when it can."""
    if fact.error and not (adds(edits) and not fact.in_record):
        return "failed", f"{fact.rel} {fact.error}"
    if not fact.exists and not adds(edits):
        return "anchor_missing", f"{fact.rel} does not exist in {res.package} {res.version}"
    return None


def adds(edits: Sequence[Edit]) -> bool:
    return any(e.op == "add_file" for e in edits)


def replay(
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
