"""PURE: apply's plan (what each spec comes to on each file, what to write, what to
journal) and the preflight that checks it against the host's space and permissions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from patcher.agent import protocol
from patcher.plan import linemerge
from patcher.plan.base import (
    Options,
    Plan,
    Rewriter,
    Write,
    adds,
    baked,
    checks_for,
    choose,
    dump_edits,
    file_problem,
    load_edits,
    pure_rewriter,
    replay,
    rewrite_problem,
    sha256_text,
    unified_diff,
    with_baked_note,
)
from patcher.plan.hostfacts import FileFact, HostFacts, JournalFile
from patcher.plan.linemerge import hand_lines
from patcher.plan.parts import Part
from patcher.result import FileChange, PatchResult
from patcher.rewrite import RewriteResult, apply_edits
from patcher.specs.model import Edit, PatchSpec, Variant


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
    ) -> Part:
        """What one file of the spec comes to: a step of its work (with the text before and
        after) or a problem, which is the spec's outcome."""
        fact = self.facts.file(spec.package, rel)
        got = file_problem(fact, edits, res)
        if got is not None:
            return Part(fact=fact, outcome=got[0], message=got[1])
        st = self.facts.journal.get(fact.path)
        if st is not None and st.applied and not st.in_sync and fact.path not in self.texts:
            if fact.record_sha256 is not None and st.current == fact.record_sha256:
                self._retire(st)
                st = None
            elif not self.opts.force:
                return Part(
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
            return Part(
                fact=fact, outcome="already_applied", message=f"{rel} has the journal's hash"
            )
        current = fact.text if fact.exists else ""
        if current is None:
            return Part(fact=fact, outcome="failed", message=f"{rel}: no text from inspect")
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
                return Part(
                    fact=fact,
                    outcome="failed",
                    message=f"{rel}: backup {str(st.base)[:12]} is missing or corrupt, so "
                    f"{spec.id}'s earlier edits cannot be taken out",
                )
            text, why = replay(st.base_text or "", st.applied, {spec.id: edits})
            if text is None:
                return Part(fact=fact, outcome="failed", message=f"{rel}: {why}")
            if text == current:
                return Part(
                    fact=fact,
                    outcome="already_applied",
                    message=f"{rel} already has the spec's new edits",
                )
            return Part(
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
            return Part(fact=fact, outcome=rw.status, message=f"{rel}: {rw.message}")
        if rw.status == "invalid":
            return Part(fact=fact, outcome="failed", message=f"{rel}: {rw.message}")
        if rw.status == "unchanged":
            if hand and self.opts.adopt:
                return self._adoption(spec, index, rel, edits, fact, current)
            if adds(edits) and fact.exists and not fact.in_record and fact.path not in self.texts:
                if st is None or not st.applied:
                    return self._added_by_hand(fact, rel, current)
            if hand and not self.opts.force:
                return Part(
                    fact=fact,
                    outcome="modified",
                    message=f"{rel} already has the desired code, but only as an edit outside "
                    "vpatch (it differs from pip's RECORD and the journal has no entry): the next "
                    "reinstall loses it",
                )
            words = baked(res.version, fact) if st is None or not st.applied else None
            if words is not None and fact.path not in self.texts:
                return Part(fact=fact, outcome="already_applied", message=words, baked=True)
            holders = self._holders(fact.path, st)
            if holders and not self._base_has(spec, index, rel, edits, fact, st):
                return Part(
                    fact=fact,
                    outcome="rely",
                    message=f"{rel} already has the desired code, from {', '.join(holders)}: "
                    f"recorded as relying on it (rolling {', '.join(holders)} back keeps this "
                    "spec's edits, applied for real)",
                    before=text,
                    after=text,
                    relies=holders,
                )
            return Part(
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
            return Part(
                fact=fact,
                outcome="modified",
                message=f"{rel} differs from pip's RECORD and vpatch did not change it (edited by "
                f"hand?{hand_lines(fact)}){why}",
            )
        undone = self._undoes(fact, st, rw.source, (spec, index, edits))
        if undone:
            return Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: this spec's edit takes out the code of {', '.join(undone)} "
                "(stacked before it on this file); apply one of them, or roll the other back first",
            )
        return Part(
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
    ) -> Part:
        """--force on a file changed since vpatch wrote it: re-patch from the bytes it has
        now. The hand edit is kept apart from vpatch's edits (`linemerge`) as the file's new
        base, so every later rollback keeps it; where it changed vpatch's own lines no base
        can keep it, and the file is refused rather than recorded as what it is not."""
        current = fact.text
        undo = "`vpatch rollback --force` restores the journal's base, then apply again"
        if st.created or st.other_version:
            why = "vpatch created it" if st.created else "its entries are of another release"
            return Part(
                fact=fact,
                outcome="failed",
                message=f"{rel} changed since vpatch wrote it and {why}; {undo}",
            )
        if current is None or st.base_text is None:
            got = st.base_error or f"backup {str(st.base)[:12]} is missing or unreadable"
            return Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: {got}; the hand edit cannot be kept apart",
            )
        wrote, why = replay(st.base_text, st.applied, {})
        if wrote is None or sha256_text(wrote) != st.expected:
            return Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: the journal's edits no longer give the bytes vpatch wrote "
                f"({why or 'other bytes'}); {undo}",
            )
        base, conflicts = linemerge.merge(wrote, current, st.base_text)
        if base is None:
            return Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: the hand edit changed vpatch's own lines ({', '.join(conflicts)} "
                f"of what vpatch wrote), so no base keeps it apart; {undo}",
            )
        mine: dict[str, Sequence[Edit]] = {spec.id: edits} if spec.id in st.applied else {}
        text, why = replay(base, st.applied, mine)
        if text is not None and not mine:
            rw = self.rewrite(text, spec, index, rel, edits)
            if rw.status not in ("changed", "unchanged"):
                return Part(
                    fact=fact, outcome=rewrite_problem(rw.status), message=f"{rel}: {rw.message}"
                )
            text = rw.source
        if text is None:
            return Part(fact=fact, outcome="failed", message=f"{rel}: {why}")
        kept = linemerge.changed_lines(st.base_text, base) or "none"
        return Part(
            fact=fact,
            outcome="changed",
            message=f"{rel}: re-patched from the bytes it has now; the hand edit ({kept}) is kept "
            "in the base every rollback restores",
            before=current,
            after=text,
            base=base,
        )

    def _added_by_hand(self, fact: FileFact, rel: str, current: str) -> Part:
        """add_file meets the spec's module already there, not pip's and not journaled: it
        was added outside vpatch. --adopt records it as created by the spec (rollback then
        removes it); otherwise it is `modified`, never satisfied by upstream."""
        if not self.opts.adopt:
            return Part(
                fact=fact,
                outcome="modified",
                message=f"{rel} has the spec's content but is not a file of the package and the "
                "journal has no entry (added by hand?); `vpatch apply --adopt` records it as this "
                "spec's, so rollback removes it",
            )
        return Part(
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
    ) -> Part:
        """--adopt: the hand-edited file already has the spec's code. Exactly the spec's
        edits are recorded as its work: on pip's bytes (which the commit stores as the backup
        rollback restores) when the file is pip's + the spec's edits, else on pip's bytes with
        the other hand edits kept (`linemerge`), which stay hand edits, named, not the spec's."""
        pristine = fact.record_text
        if pristine is None:
            return Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: pip's bytes of it are not at hand (the wheel)",
            )
        if sha256_text(pristine) != fact.record_sha256:
            return Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: the wheel's bytes do not have RECORD's sha256; not adopted",
            )
        rw = self.rewrite(pristine, spec, index, rel, edits)
        if rw.status not in ("changed", "unchanged"):
            return Part(
                fact=fact,
                outcome="failed",
                message=f"{rel}: on pip's bytes: {rw.message}; not adopted",
            )
        if rw.status == "unchanged":
            return Part(
                fact=fact,
                outcome="unchanged",
                message=f"{rel}: pip's bytes already have the desired code; the hand edits in the "
                "file are not the spec's, nothing adopted",
            )
        if rw.source == current:
            return Part(
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
            return Part(
                fact=fact,
                outcome="modified",
                message=f"{rel} has the spec's code, but the hand edit also changed the spec's own "
                f"lines ({where}); not adopted: --adopt records exactly the spec's edits",
            )
        others = linemerge.changed_lines(pristine, base)
        return Part(
            fact=fact,
            outcome="adopt",
            message=f"{rel}: adopted the spec's edits only; the other differences from pip's bytes "
            f"({others}) stay hand edits (modified), kept in the base rollback restores",
            before=base,
            after=current,
        )

    def _adopt(
        self, spec: PatchSpec, variant: Variant, part: Part, res: PatchResult, plan: Plan
    ) -> None:
        """Journal the hand edit as the spec's, on its base (seeded as a backup; none for a
        module added by hand, which the entry records as created): no write."""
        assert part.before is not None and part.after is not None
        if not part.created:
            plan.backups.append({"sha256": sha256_text(part.before), "text": part.before})
        self._record(spec, variant, part, res, sha256_text(part.after), "adopted a hand edit")

    def _stage(self, spec: PatchSpec, variant: Variant, part: Part, res: PatchResult) -> None:
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
        part: Part,
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
                spec=spec.id,
                spec_hash=spec.digest,
                package=spec.package,
                version=self.facts.versions.get(spec.package),
                file=fact.rel,
                path=fact.path,
                before=before,
                after=after,
                edits=dump_edits([e for r, es in variant.files() if r == fact.rel for e in es]),
                record_sha256=fact.record_sha256,
                checks=checks_for(spec, variant, "full"),
                reason=reason,
                relies_on=part.relies,
                level=self.opts.level,
                base=sha256_text(part.base) if part.base is not None else None,
                versions=variant.versions,
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


def plan_apply(
    specs: Sequence[PatchSpec],
    facts: HostFacts,
    opts: Options,
    rewrite: Rewriter = pure_rewriter,
) -> Plan:
    """apply: per spec the outcome, per file one write (all its specs stacked), the journal."""
    return _Apply(facts, opts, rewrite).plan(specs)
