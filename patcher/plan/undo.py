"""PURE: what a failed check puts back (plan_undo), what a commit cut short is brought
forward to (plan_redo), and the words for what was undone."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from patcher.agent import protocol
from patcher.plan.base import Plan, Write
from patcher.plan.hostfacts import HostFacts
from patcher.result import PatchResult, ProbeResult


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
