"""Random stacks of specs made from the golden rewrite cases (tests/cases/<op>/*.py), for the
property of issue 25 item 5: apply -> verify is always green, rollback-all gives the base bytes.

Every rewrite case that changes its input becomes a spec of the package `propkit`; cases with
the same input text share one module (so their specs stack on one file, the interesting part),
the others get one each, and an add_file case creates its own module. `PaperHost` is a host on
paper for the pure variant: files, RECORD hashes, backups and the journal, folded by the
agent's own fold, committed the way the agent commits (backup, entries, marker).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patcher.agent.journal import fold
from patcher.plan.base import Plan
from patcher.plan.hostfacts import HostFacts
from patcher.specs.model import PatchSpec, from_data
from tests.support.cases import CASES, load_case

PACKAGE = "propkit"
VERSION = "1.0.0"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Pick:
    """One golden case as a spec's one edit on one module."""

    name: str  # <op>/<case>
    rel: str  # the module it edits, in site-packages
    edit: dict[str, Any]


def _picks() -> tuple[list[Pick], dict[str, str]]:
    """(every changing case as a Pick, rel -> the module's text in the wheel)."""
    sources: dict[str, str] = {}
    picks: list[Pick] = []
    for path in sorted(CASES.glob("*/*.py")):
        case = load_case(path)
        if case.status != "changed":
            continue
        name = f"{path.parent.name}/{path.stem}"
        edit = dict(case.edit.dumped)
        edit.pop("file", None)
        if edit["op"] == "add_file":
            rel = f"{PACKAGE}/added_{path.stem}.py"
        else:
            rel = next((r for r, t in sources.items() if t == case.source), "")
            if not rel:
                rel = f"{PACKAGE}/m{len(sources):03d}.py"
                sources[rel] = case.source
        picks.append(Pick(name, rel, edit))
    return picks, sources


PICKS, SOURCES = _picks()
# the picks whose module another pick edits too: where stacks are
SHARED = [p for p in PICKS if sum(q.rel == p.rel for q in PICKS) > 1]


def specs_of(picks: list[Pick]) -> list[PatchSpec]:
    """One spec per pick, ids in stack order (a pick may repeat: same edit, another spec)."""
    return [
        from_data(
            {
                "id": f"s{i}-{p.name.replace('/', '-').replace('_', '-')}",
                "summary": f"golden case {p.name}",
                "package": PACKAGE,
                "variant": [{"versions": ">=0", "file": p.rel, "edit": [p.edit]}],
            }
        )
        for i, p in enumerate(picks)
    ]


def base_files(picks: list[Pick]) -> dict[str, str | None]:
    """rel -> the module's text before any spec (None: add_file's module, absent)."""
    return {p.rel: SOURCES.get(p.rel) for p in picks}


ROOT = "/env/lib/python3.11/site-packages/"


@dataclass
class PaperHost:
    """The host's side of inspect and commit, on paper (see module docstring)."""

    files: dict[str, str | None]  # rel -> text (None: absent)
    record: dict[str, str | None] = field(
        default_factory=dict
    )  # rel -> RECORD sha (None: not pip's)
    entries: list[dict[str, Any]] = field(default_factory=list)
    backups: dict[str, str] = field(default_factory=dict)
    txns: int = 0

    @classmethod
    def fresh(cls, files: dict[str, str | None]) -> PaperHost:
        return cls(dict(files), {r: (sha(t) if t is not None else None) for r, t in files.items()})

    def current(self) -> dict[str, str | None]:
        return {ROOT + r: (sha(t) if t is not None else None) for r, t in self.files.items()}

    def facts(self) -> HostFacts:
        files = {
            rel: {
                "path": ROOT + rel,
                "exists": text is not None,
                "sha256": sha(text) if text is not None else None,
                "record_sha256": self.record.get(rel),
                "text": text,
                "writable": True,
                "free": 10**9,
                "in_record": self.record.get(rel) is not None,
                "error": None
                if text is None or self.record.get(rel) is not None
                else "is not a file of propkit (not in its RECORD)",
            }
            for rel, text in self.files.items()
        }
        folded = fold(self.entries, self.current())
        journal: dict[str, Any] = {}
        for path, st in folded.items():
            if not st["applied"]:
                continue
            rel = path.removeprefix(ROOT)
            st.update(
                base_text=self.backups.get(st["base"] or ""),
                current=self.current()[path],
                current_text=self.files[rel],
                package_version=VERSION,
                record_sha256=self.record.get(rel),
            )
            journal[path] = st
        answer = {
            "python": {"executable": "/env/bin/python", "version": "3.11.7"},
            "packages": {PACKAGE: {"version": VERSION, "files": files}},
            "journal": journal,
            "state": {"dir": "/env/.vpatch", "writable": True, "why": "", "free": 10**9},
        }
        return HostFacts.from_answer(json.loads(json.dumps(answer)))

    def commit(self, plan: Plan) -> None:
        """What the agent's commit does, checked the way it checks: hashes first, then
        backups (old bytes, and the plan's seeded ones), entries and a marker, then writes."""
        now = self.current()
        for w in plan.writes:
            assert now[w.path] == w.expect, (w.path, "conflict")
        for b in plan.backups:
            assert sha(b["text"]) == b["sha256"]
            self.backups[b["sha256"]] = b["text"]
        self.txns += 1
        txn = f"t{self.txns}"
        for w in plan.writes:
            rel = w.path.removeprefix(ROOT)
            old = self.files[rel]
            if old is not None:
                self.backups[sha(old)] = old
            if w.delete:
                self.files[rel] = None
            elif w.restore is not None:
                self.files[rel] = self.backups[w.restore]
            else:
                self.files[rel] = w.text
        self.entries += [dict(e, txn=txn) for e in plan.entries]
        self.entries.append({"action": "commit", "txn": txn})


def site_files(site: Path, rels: list[str]) -> dict[str, str | None]:
    """rel -> text of the module in a real site-packages now (None: absent)."""
    return {r: (site / r).read_text("utf-8") if (site / r).exists() else None for r in rels}
