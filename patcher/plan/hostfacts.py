"""PURE: a host's facts, typed: the inspect answer as the planner reads it.

The agent answers inspect with plain JSON (`patcher/agent/protocol.py` names its keys); these
frozen dataclasses are that answer once, checked for shape and built by keyword, so a fact can
never land in its neighbour's field. `patcher.plan` decides from them and nothing else; the
engine builds them (`HostFacts.from_answer`) and the golden cases build them from a case's data
(`tests/support/plancases.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _str_or_none(value: Any) -> str | None:
    """A string the host sent, or None: a host may send anything, the report keeps strings."""
    return value if isinstance(value, str) else None


@dataclass(frozen=True, kw_only=True)
class FileFact:
    """One target file of a package, as inspect found it."""

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

    @classmethod
    def from_answer(cls, rel: str, info: dict[str, Any]) -> FileFact:
        """The fact of `rel` from inspect's entry for it (missing keys: unknown)."""
        return cls(
            rel=rel,
            path=str(info.get("path", rel)),
            exists=bool(info.get("exists")),
            sha256=info.get("sha256"),
            record_sha256=info.get("record_sha256"),
            text=info.get("text"),
            error=info.get("error"),
            writable=info.get("writable"),
            why_unwritable=info.get("why_unwritable"),
            free=info.get("free"),
            in_record=info.get("in_record", True) is not False,
            record_text=info.get("record_text"),
        )


@dataclass(frozen=True, kw_only=True)
class JournalFile:
    """One journaled file, as the agent folded the journal (`patcher/agent/journal.py`): the
    specs applied in order, the base (bytes before the first) and the expected hash (what
    vpatch last wrote), next to what the file is now."""

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

    @classmethod
    def from_answer(cls, path: str, st: dict[str, Any]) -> JournalFile:
        """The journaled file at `path` from inspect's folded journal entry for it."""
        return cls(
            path=path,
            applied=dict(st.get("applied") or {}),
            expected=st.get("expected"),
            base=st.get("base"),
            base_text=st.get("base_text"),
            current=st.get("current"),
            current_text=st.get("current_text"),
            created=bool(st.get("created")),
            package_version=st.get("package_version"),
            record_sha256=st.get("record_sha256"),
            base_error=st.get("base_error"),
        )

    @property
    def in_sync(self) -> bool:
        """True when the file has the bytes vpatch last wrote (and the journal holds a spec)."""
        return bool(self.applied) and self.current == self.expected

    @property
    def reinstalled(self) -> bool:
        """True when the file is pip's bytes again (reinstall or upgrade): the journal's
        entries no longer hold."""
        return (
            bool(self.applied)
            and self.current != self.expected
            and self.current is not None
            and self.current == self.record_sha256
        )

    @property
    def other_version(self) -> bool:
        """True when the entries were made against a release other than the one installed."""
        return any(e.get("version") != self.package_version for e in self.applied.values())


@dataclass(frozen=True, kw_only=True)
class HostFacts:
    """Everything one inspect answer says that a plan is made from."""

    python: str  # "PATH (VERSION)", as the report has always shown it
    python_path: str | None = None  # sys.executable on the host (None: the agent did not say)
    python_version: str | None = None  # its "MAJOR.MINOR.MICRO" (sys.version_info)
    versions: dict[str, str | None]
    files: dict[str, dict[str, FileFact]]  # package -> rel -> fact
    journal: dict[str, JournalFile]
    state: dict[str, Any] = field(default_factory=dict)
    restart_required: list[dict[str, Any]] = field(default_factory=list)
    incomplete: list[dict[str, Any]] = field(default_factory=list)
    # what the agent skipped in the host's state (ill-formed journal lines, journaled paths
    # outside site-packages): said in the report, never fatal
    warnings: list[str] = field(default_factory=list)
    # journaled files gone with their package (pip uninstall): path -> spec ids applied there
    orphaned: dict[str, list[str]] = field(default_factory=dict)
    # specs baked into installed wheels (`vpatch wheel`): (package, installed version, spec
    # id), from the dist-info's vpatch.json (agent/baked.py; asked by bare status, rollback)
    baked: list[tuple[str, str, str]] = field(default_factory=list)
    # (spec id, txn) of writes whose checks never finished (protocol.VERIFIED)
    unverified: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def from_answer(cls, raw: dict[str, Any]) -> HostFacts:
        """The typed facts of an inspect answer (the agent's JSON shape)."""
        py = raw.get("python", {})
        versions: dict[str, str | None] = {}
        files: dict[str, dict[str, FileFact]] = {}
        for name, pkg in (raw.get("packages") or {}).items():
            versions[name] = pkg.get("version")
            files[name] = {
                rel: FileFact.from_answer(rel, info)
                for rel, info in (pkg.get("files") or {}).items()
            }
        return cls(
            python=f"{py.get('executable', '?')} ({py.get('version', '?')})",
            python_path=_str_or_none(py.get("executable")),
            python_version=_str_or_none(py.get("version")),
            versions=versions,
            files=files,
            journal={
                path: JournalFile.from_answer(path, st)
                for path, st in (raw.get("journal") or {}).items()
            },
            state=dict(raw.get("state") or {}),
            restart_required=list(raw.get("restart_required") or []),
            incomplete=list(raw.get("incomplete") or []),
            warnings=[str(w) for w in raw.get("warnings") or []],
            orphaned={
                str(p): [str(x) for x in ids] for p, ids in (raw.get("orphaned") or {}).items()
            },
            baked=[
                (str(d.get("package")), str(d.get("version")), str(s.get("id")))
                for d in raw.get("baked") or []
                for s in (d.get("manifest") or {}).get("specs") or []
                if isinstance(s, dict)
            ],
            unverified=[(str(x[0]), str(x[1])) for x in raw.get("unverified") or []],
        )

    def file(self, package: str, rel: str) -> FileFact:
        """The fact of one file of `package`; one that was not inspected, as a failed one."""
        got = self.files.get(package, {}).get(rel)
        return got or FileFact(
            rel=rel,
            path=rel,
            exists=False,
            sha256=None,
            record_sha256=None,
            text=None,
            error="was not inspected",
        )
