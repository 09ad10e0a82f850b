"""Planner golden cases: tests/cases/plan/<case>.json, loaded into typed facts.

A case is data: texts by name, specs, what inspect found on the host (files by text name,
the folded journal), and what the plan must say (outcomes, message words, writes by text name,
journal actions). Hashes are never written by hand: every `sha256` is derived from a named text,
so a case reads like the situation it pins.

    {"about": "...", "command": "apply|verify|rollback|status|ensure|matrix", "options": {...},
     "rollback": ["id"] | null,
     "texts": {"pristine": "...", "patched": "..."},
     "specs": [<spec as TOML would give it>], "old_specs": [<specs whose edits a journal holds>],
     "host": {"versions": {"pkg": "1.0.0"},
              "files": {"pkg/m.py": {"text": "patched", "record": "pristine"}},
              "journal": {"pkg/m.py": {"applied": [{"spec": "x", "edits_from": "x",
                                                     "relies_on": ["w"], "level": "static"}],
                                        "base": "pristine", "expected": "patched"}}},
     "expect": {"outcomes": {...}, "messages": {...}, "unsaid": {...}, "said_once": {...},
                "writes": {"pkg/m.py": "text name" |
                "delete" | "restore:<text name>"}, "journal": [[action, spec, file]],
                "checks": ["spec id"], "check_names": {"spec id": ["check name"]},
                "preflight": "words" | null,
                "backups": ["text name"]}}
A file's "record_text" names the text the controller fetched as pip's bytes (apply --adopt).

`ensure`: apply's plan, then (`"recheck": LEVEL`, null for none) verify of the specs in place
on the host as the commit left it, with `"probes": {"spec id": [{"name", "ok", "detail"}]}` as
the host's answer to their checks; `expect.probes` names the probes each result carries.
`matrix`: no host; `"release": {"version": "1.0", "files": {"rel": "text name" | null |
{"hex": "..."}}}` is the release's wheel (null: not in it); `expect.variants` the index chosen.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patcher.agent.journal import fold
from patcher.plan.base import Options, Plan, dump_edits
from patcher.plan.hostfacts import HostFacts
from patcher.specs.model import PatchSpec, from_data

ROOT = "/env/lib/python3.11/site-packages/"
CASES = Path(__file__).resolve().parent.parent / "cases" / "plan"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class PlanCase:
    name: str
    raw: dict[str, Any]
    texts: dict[str, str]
    specs: list[PatchSpec]
    old: dict[str, PatchSpec]
    facts: HostFacts
    answer: dict[str, Any]  # the inspect answer the facts came from
    opts: Options

    def text_name(self, text: str | None) -> str | None:
        """The case's name for a text (None when the plan made a text the case does not name)."""
        if text is None:
            return None
        return next((n for n, t in self.texts.items() if t == text), None)


def case_paths() -> list[Path]:
    return sorted(CASES.glob("*.json"))


def load(path: Path) -> PlanCase:
    raw = json.loads(path.read_text("utf-8"))
    texts: dict[str, str] = raw.get("texts", {})
    specs = [from_data(s) for s in raw.get("specs", [])]
    old = {s.id: s for s in (from_data(x) for x in raw.get("old_specs", []))}
    answer = host_answer(raw.get("host", {}), texts, {s.id: s for s in specs}, old)
    opts = Options(**raw.get("options", {}))
    return PlanCase(path.stem, raw, texts, specs, old, HostFacts.from_answer(answer), answer, opts)


def release_files(case: PlanCase) -> dict[str, bytes | None]:
    """A matrix case's files as the release's wheel ships them (None: not in the wheel)."""
    out: dict[str, bytes | None] = {}
    for rel, f in case.raw["release"]["files"].items():
        if f is None:
            out[rel] = None
        elif isinstance(f, dict):
            out[rel] = bytes.fromhex(f["hex"])
        else:
            out[rel] = case.texts[f].encode("utf-8")
    return out


def _edits_of(spec: PatchSpec, rel: str) -> list[Any]:
    for var in spec.variant:
        for r, edits in var.files() if var.upstream is None else []:
            if r == rel:
                return dump_edits(edits)
    raise AssertionError(f"spec {spec.id} has no edit of {rel}")


def host_answer(
    host: dict[str, Any],
    texts: dict[str, str],
    specs: dict[str, PatchSpec],
    old: dict[str, PatchSpec],
) -> dict[str, Any]:
    """The inspect answer (the agent's shape) the case's host stands for."""
    versions: dict[str, str | None] = host.get("versions", {})
    first = next(iter(versions), "servekit")
    packages: dict[str, Any] = {p: {"version": v, "files": {}} for p, v in versions.items()}
    state = {"dir": "/env/.vpatch", "writable": True, "why": "", "free": 10**9}
    state.update(host.get("state", {}))
    records: dict[str, str | None] = {}
    currents: dict[str, str | None] = {}
    for rel, f in host.get("files", {}).items():
        text = texts[f["text"]] if f.get("text") else None
        record = sha(texts[f["record"]]) if f.get("record") else None
        records[rel], currents[rel] = record, (sha(text) if text is not None else None)
        info = {
            "path": ROOT + rel,
            "exists": text is not None,
            "sha256": currents[rel],
            "record_sha256": record,
            "text": text,
            "error": f.get("error"),
            "writable": f.get("writable", True),
            "why_unwritable": f.get("why_unwritable"),
            "free": f.get("free", 10**9),
            "in_record": f.get("in_record", True),
        }
        if f.get("record_text"):  # --adopt: pip's bytes, as the controller fetched them
            info["record_text"] = texts[f["record_text"]]
        packages[f.get("package", first)]["files"][rel] = info
    journal: dict[str, Any] = {}
    for rel, j in host.get("journal", {}).items():
        applied: dict[str, Any] = {}
        for a in j["applied"]:
            ef = a.get("edits_from", a["spec"])
            src = old.get(ef) or specs.get(ef)
            spec = specs.get(a["spec"]) or old[a["spec"]]
            applied[a["spec"]] = {
                "action": "apply",
                "spec": a["spec"],
                "spec_hash": spec.digest if src is spec else "0" * 16,
                "package": spec.package,
                "version": a.get("version", versions.get(spec.package)),
                "file": rel,
                "path": ROOT + rel,
                "edits": _edits_of(src, rel) if src is not None else [],
                "checks": a.get("checks", []),
            }
            for key in ("relies_on", "level", "versions"):  # optional keys of an apply entry
                if key in a:
                    applied[a["spec"]][key] = a[key]
        base = j.get("base")
        pkg = next(iter(applied.values()))["package"]
        journal[ROOT + rel] = {
            "applied": applied,
            "expected": sha(texts[j["expected"]]),
            "base": sha(texts[base]) if base else None,
            "base_text": texts[base] if base and not j.get("backup_missing") else None,
            "current": currents.get(rel),
            "current_text": texts.get(host["files"][rel].get("text") or ""),
            "created": bool(j.get("created")),
            "package_version": versions.get(pkg),
            "record_sha256": records.get(rel),
        }
    return {
        "python": {"executable": "/env/bin/python", "version": "3.11.7"},
        "packages": packages,
        "journal": journal,
        "state": state,
        # journaled files gone with their package: path -> spec ids (the agent's _confined)
        "orphaned": {ROOT + rel: ids for rel, ids in host.get("orphaned", {}).items()},
        # wheels `vpatch wheel` built, as agent/baked.py lists them (bare status, rollback)
        "baked": host.get("baked", []),
    }


def after_commit(case: PlanCase, plan: Plan) -> HostFacts:
    """The host once the plan is committed: files rewritten and the journal folded by the
    agent's own fold (`patcher.agent.journal`), as the next inspect would report it."""
    answer = json.loads(json.dumps(case.answer))
    backups = {sha(t): t for t in case.texts.values()}
    backups.update({b["sha256"]: b["text"] for b in plan.backups})
    entries: list[dict[str, Any]] = []
    for st in answer["journal"].values():
        for e in st["applied"].values():
            entries.append(dict(e, before=st["base"], after=st["expected"], txn="t0"))
    entries.append({"action": "commit", "txn": "t0"})
    current: dict[str, str | None] = {}
    for w in plan.writes:
        rel = w.path.removeprefix(ROOT)
        info = next(p["files"][rel] for p in answer["packages"].values() if rel in p["files"])
        if w.delete:
            new = None
        elif w.restore is not None:
            new = backups[w.restore]
        else:
            new = w.text
        if info.get("text") is not None:
            backups[sha(info["text"])] = info["text"]
        info.update(text=new, exists=new is not None, sha256=sha(new) if new else None)
        info["error"] = None
    for p in answer["packages"].values():
        for rel, info in p["files"].items():
            current[ROOT + rel] = info["sha256"]
    entries += [dict(e, txn="t1") for e in plan.entries] + [{"action": "commit", "txn": "t1"}]
    folded = fold(entries, current)
    journal: dict[str, Any] = {}
    for path, st in folded.items():
        if not st["applied"]:
            continue
        rel = path.removeprefix(ROOT)
        info = next(p["files"][rel] for p in answer["packages"].values() if rel in p["files"])
        st.update(
            base_text=backups.get(st["base"] or ""),
            current=current.get(path),
            current_text=info.get("text"),
            package_version=answer["journal"].get(path, {}).get("package_version")
            or next(iter(answer["packages"].values()))["version"],
            record_sha256=info.get("record_sha256"),
        )
        journal[path] = st
    answer["journal"] = journal
    return HostFacts.from_answer(answer)
