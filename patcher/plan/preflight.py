"""PURE: whether a host can take apply's plan, from inspect's answer alone (its state dir's
and target directories' permissions and free space), so that such a host costs one error line
and nothing written."""

from __future__ import annotations

import json

from patcher.plan.base import Plan
from patcher.plan.hostfacts import HostFacts


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
