"""PURE: rollback's plan: the remaining specs' recorded edits rebuilt on each file's base,
or the base restored, never bytes of another release."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from patcher.agent import protocol
from patcher.plan.base import (
    Options,
    Plan,
    Write,
    baked_release,
    recorded_checks,
    replay,
    sha256_text,
    unified_diff,
)
from patcher.plan.hostfacts import HostFacts, JournalFile
from patcher.result import FileChange, PatchResult
from patcher.specs.model import PatchSpec


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
    text, why = replay(st.base_text or "", keep, {})
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
