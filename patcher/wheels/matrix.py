"""`vpatch matrix`: which releases of a package does a spec fit, and which are fixed upstream?

This module selects the releases and runs the matrix; every verdict is the planner's
(`patcher.plan.verdicts.matrix_choose`, `judge_release`), made as on a host but with no host: the
variant `choose` picks, `satisfied_upstream` for an `upstream` variant, otherwise the variant's
edits run on the file as the release's wheel ships it.

Only what a verdict needs is fetched. Releases with no variant or an `upstream` variant cost
nothing; for the others the files come from the wheels room (`patcher.wheels.cache`: the
release's target files and RECORD, extracted once from the wheel store's wheel). Verdicts are
cached too (`Decisions`), keyed by the files' hashes, the spec's digest and a hash of the rules
(spec, plan, rewrite), so a rewrite fix can never serve a stale answer.

Cache: $VPATCH_MATRIX_CACHE, else $XDG_CACHE_HOME/vpatch/matrix, else ~/.cache/vpatch/matrix.
Wheels already on disk are reused (never deleted) from `--wheelhouse`, $VPATCH_WHEELHOUSE and
the directories in $VPATCH_MATRIX_WHEELS (os.pathsep-separated), e.g. a test suite's wheels.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from patcher.errors import UsageError, VpatchError
from patcher.plan.verdicts import (
    MATRIX_FAILING,
    MatrixOutcome,
    Verdict,
    judge_release,
    matrix_choose,
)
from patcher.result import SCHEMA_VERSION
from patcher.specs.model import PatchSpec, Variant
from patcher.wheels import index, wheelhouse
from patcher.wheels.cache import Cache, Fetcher, FetchStats, default_cache
from patcher.wheels.store import Store, index_hint

DEFAULT_JOBS = 4


@dataclass
class Release:
    """One row: a release, the index of the `[[variant]]` chosen for it (null when none
    covers it), the outcome, and why."""

    version: str
    variant: int | None
    outcome: MatrixOutcome
    message: str = ""


@dataclass
class Matrix:
    spec: str
    package: str
    releases: list[Release]
    versions: str = ""  # the range examined, for the human header (not in the JSON)
    platforms: list[str] = field(default_factory=list)  # --platform: whose wheels were asked for
    no_wheel: list[str] = field(default_factory=list)  # releases in range with none for them

    @property
    def ok(self) -> bool:
        return not any(r.outcome in MATRIX_FAILING for r in self.releases)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "matrix",
            "ok": self.ok,
            "spec": self.spec,
            "package": self.package,
            "releases": [asdict(r) for r in self.releases],
            "platforms": list(self.platforms),
            "no_wheel": list(self.no_wheel),
        }


@dataclass
class Stats(FetchStats):
    """Where the answers came from: proof that a second run downloads nothing."""

    cached_results: int = 0
    computed: int = 0


# ---------------------------------------------------------------------------------------------
# Which releases


def parse_range(text: str | None) -> SpecifierSet | None:
    """`--versions`, validated before anything is fetched (a typo is exit 2)."""
    if text is None:
        return None
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise UsageError(
            f"--versions {text!r} is not a PEP 440 specifier", "e.g. --versions '>=0.11,<0.20'"
        ) from None


def select(
    spec: PatchSpec,
    available: Sequence[Version],
    wanted: SpecifierSet | None,
    pre: bool,
    text: str = "",
) -> tuple[list[Version], str]:
    """Releases to examine, oldest first, and the range in words.

    Without `--versions`: every release from the oldest one a variant covers onwards, so a gap
    between variants and a release newer than the last variant both show as `not_covered`.
    """
    if wanted is not None:
        chosen = [v for v in available if wanted.contains(v, prereleases=pre)]
        return sorted(chosen), text or str(wanted)
    covered = [v for v in available if spec.choose_variant(str(v)) is not None]
    if not covered:
        return [], "(no release is in a variant's range)"
    first = min(covered)
    return sorted(v for v in available if v >= first), f">={first}"


# ---------------------------------------------------------------------------------------------
# The decisions already made


def _rules_fingerprint() -> str:
    """Hash of the code a decision depends on: cached decisions die with any change to it."""
    here = Path(__file__).resolve().parent.parent  # patcher/
    h = hashlib.sha256()
    rules = [here / "specs" / "model.py", *sorted((here / "plan").glob("*.py"))]
    for path in [*rules, *sorted((here / "rewrite").glob("*.py"))]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


_RULES = _rules_fingerprint()


class Decisions:
    """`<cache root>/results/`: a release's verdict, keyed by the files' hashes, the spec's
    digest and a hash of the rules (spec, plan, rewrite), so a rewrite fix never serves a
    stale answer."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "results"

    def key(self, spec: PatchSpec, index: int, data: bytes) -> Path:
        """The file that holds the verdict of variant `index` on files hashing to `data`."""
        blob = json.dumps([_RULES, spec.digest, index, hashlib.sha256(data).hexdigest()])
        return self.dir / f"{hashlib.sha256(blob.encode()).hexdigest()[:32]}.json"

    def get(self, key: Path) -> tuple[MatrixOutcome, str] | None:
        """(outcome, message) decided before; None when there is none (or it is unreadable)."""
        try:
            doc = json.loads(key.read_text())
            return doc["outcome"], doc["message"]
        except (OSError, ValueError, KeyError):
            return None

    def put(self, key: Path, release: Release) -> None:
        """Keep the release's verdict (written whole, then renamed into place)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = key.with_name(f".{key.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps({"outcome": release.outcome, "message": release.message}))
        tmp.replace(key)


# ---------------------------------------------------------------------------------------------
# Running the matrix


class MatrixProgress:
    """Silent by default; the CLI swaps in a rich bar on a terminal."""

    def start(self, total: int) -> None: ...
    def fetching(self, version: Version) -> None: ...
    def done(self, release: Release) -> None: ...
    def stop(self) -> None: ...


@dataclass
class Runner:
    """Every release's verdict: the planner decides, the cache and the store bring the files."""

    spec: PatchSpec
    cache: Cache
    jobs: int = DEFAULT_JOBS
    platforms: Sequence[str] = ()
    progress: MatrixProgress = field(default_factory=MatrixProgress)
    stats: Stats = field(default_factory=Stats)
    store: Store | None = None

    def run(self, versions: Sequence[Version]) -> list[Release]:
        """Every release's answer, in version order; downloads run `jobs` at a time."""
        self.progress.start(len(versions))
        answers: dict[Version, Release] = {}
        pending: list[tuple[Version, int, Variant]] = []
        for v in versions:
            got = matrix_choose(self.spec, str(v))
            if isinstance(got, Verdict):
                answers[v] = _release(v, got)
                self.progress.done(answers[v])
            else:
                pending.append((v, *got))
        with ThreadPoolExecutor(max_workers=max(1, self.jobs)) as pool:
            for v, release in zip(
                [p[0] for p in pending], pool.map(lambda p: self._one(*p), pending), strict=True
            ):
                answers[v] = release
        return [answers[v] for v in sorted(answers)]

    def _one(self, version: Version, index: int, variant: Variant) -> Release:
        """The release's row; one that could not be examined is `failed`, with why."""
        try:
            files = {rel: self._file(version, rel) for rel, _ in variant.files()}
            release = self._decide(version, index, variant, files)
        except VpatchError as exc:
            hint = f" (hint: {exc.hint})" if exc.hint else ""
            release = Release(str(version), index, "failed", exc.message + hint)
        except OSError as exc:  # the cache dir: full disk, permissions
            release = Release(str(version), index, "failed", f"cache: {exc}")
        self.progress.done(release)
        return release

    def _decide(
        self, version: Version, index: int, variant: Variant, files: dict[str, bytes | None]
    ) -> Release:
        """The release's row from the planner's verdict, reused from `Decisions` when the
        same files were judged before (a verdict on a file the wheel lacks is not kept)."""
        if any(d is None for d in files.values()):
            return _release(version, judge_release(index, variant, files))
        data = b"".join(
            rel.encode() + b"\0" + hashlib.sha256(d or b"").digest() for rel, d in files.items()
        )
        decisions = Decisions(self.cache.root)
        key = decisions.key(self.spec, index, data)
        hit = decisions.get(key)
        if hit is not None:
            self.stats.add("cached_results")
            return Release(str(version), index, hit[0], hit[1])
        release = _release(version, judge_release(index, variant, files))
        self.stats.add("computed")
        if release.outcome != "failed":
            decisions.put(key, release)
        return release

    def _file(self, version: Version, rel: str) -> bytes | None:
        """The file's bytes in the release's wheel (None: not in it), through the cache."""
        if self.store is None:
            self.store = Store(platforms=self.platforms)
        got = Fetcher(self.spec.package, self.cache, self.store, self.progress, self.stats)
        return got.file(version, rel)


def _release(version: Version, verdict: Verdict) -> Release:
    """The matrix's row for the planner's verdict on one release."""
    return Release(str(version), verdict.variant, verdict.outcome, verdict.message)


def build(
    spec: PatchSpec,
    *,
    versions: str | None,
    pre: bool = False,
    jobs: int = DEFAULT_JOBS,
    platforms: Sequence[str] = (),
    cache_root: Path | None = None,
    progress: MatrixProgress | None = None,
    list_versions: Callable[..., list[Version]] | None = None,
    store: Store | None = None,
) -> tuple[Matrix, Stats]:
    """(matrix, stats): releases listed through pip (else the wheelhouses), the range
    picked, every release decided; the wheels come from the run's `store` (default: one of
    the matrix's own)."""
    store = store if store is not None else Store(platforms=platforms)
    wanted = parse_range(versions)  # before any pip call: a typo is exit 2, nothing fetched
    missing: set[Version] = set()  # --platform: releases with no wheel pip takes for it
    if list_versions is None and platforms:
        try:
            missing = set(store.releases_without_wheel(spec.package, pre, platforms))
        except index.PipError:
            pass  # listed below, and said there, if no index answers
    list_versions = list_versions or store.list_versions  # the index client (or pip's)
    try:
        available = list_versions(spec.package, pre=pre, platforms=platforms)
    except index.PipError:
        if not wheelhouse.listed_versions(spec.package, store.wheelhouses):
            raise
        available = []
    if not available:  # air-gapped: the releases the wheelhouses hold
        available = [
            v
            for v in wheelhouse.listed_versions(spec.package, store.wheelhouses)
            if pre or not v.is_prerelease
        ]
    if not available:  # pip says the same for a typo, an unreachable index and no wheels
        raise index.PipError(
            f"no configured index lists a release of {spec.package}",
            index_hint(spec.package),
        )
    every = sorted(set(available) | missing)  # the range is the releases', wheel or not
    chosen, described = select(spec, every, wanted, pre, versions or "")
    no_wheel = [str(v) for v in chosen if v in missing]
    chosen = [v for v in chosen if v not in missing]
    if not chosen and no_wheel:
        raise UsageError(
            f"no release of {spec.package} in range {described} has a wheel for "
            f"{', '.join(platforms)} ({len(no_wheel)} without one: {', '.join(no_wheel)})",
            "check the --platform tag (e.g. manylinux_2_28_x86_64), or widen --versions",
        )
    if not chosen:
        raise UsageError(
            f"no release of {spec.package} is in range {described} "
            f"({len(available)} release(s) listed by the indexes)",
            "widen --versions (and --pre for pre-releases), or check the package name",
        )
    runner = Runner(
        spec,
        Cache(cache_root or default_cache(), spec.package),
        jobs=jobs,
        platforms=platforms,
        progress=progress or MatrixProgress(),
        store=store,
    )
    try:
        releases = runner.run(chosen)
    finally:
        runner.progress.stop()
    table = Matrix(
        spec.id, spec.package, releases, described, platforms=list(platforms), no_wheel=no_wheel
    )
    return table, runner.stats
