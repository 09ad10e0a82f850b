"""PURE: verify and status: whether each spec holds on the host, from its facts and the
journal alone (a bare status has no spec file)."""

from __future__ import annotations

from typing import Any

from patcher.plan.base import (
    Level,
    Rewriter,
    adds,
    baked,
    choose,
    drift_state,
    dump_edits,
    file_problem,
    load_edits,
    pure_rewriter,
    recorded_checks,
    replay,
    rewrite_outcome,
    sha256_text,
    with_baked_note,
)
from patcher.plan.hostfacts import HostFacts, JournalFile
from patcher.plan.linemerge import hand_lines
from patcher.plan.monitor import UPGRADED
from patcher.result import FileChange, Outcome, PatchResult
from patcher.rewrite import apply_edits
from patcher.specs.model import PatchSpec, Variant


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
        got = file_problem(fact, edits, res) if fact.exists or not adds(edits) else None
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
    without, _why = replay(st.base_text or "", st.applied, {sid: []})
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
