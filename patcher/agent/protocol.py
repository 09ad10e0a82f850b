"""The wire and the journal, defined once: imported by the agent (stdlib, Python 3.9+) and by
the controller, so a request, an answer's error kind or a journal entry has a single shape.

Why one module: the controller used to decide a retry by matching the agent's message text, and
built journal entries the agent then folded by its own idea of their keys. Here the error kinds
are constants both sides compare, and every journal entry is made by a constructor below.

Requests (one JSON object per line; `op` picks the handler in `patcher.agent.OPS`):
    inspect  {"packages": {dist: [rel, ...]}, "state_dir", "known": [sha256...], "procs_for"?}
    commit   {"writes": [Write...], "journal": [Entry...], "state_dir", "gc"?: [sha256...],
             "fault"?, "backups"?: [{"sha256", "text"}]}: gc names backups no entry needs any
             more (superseded releases); backups are stored, hash-checked, first (--adopt)
    repair   {"state_dir"}: finish or undo a half-written transaction (under the lock)
    verify   {"checks": [{"name", "module", "code", "timeout"?}]}
    procs    {"paths": [...]}
    fetch    {"url", "timeout", "max_bytes"}
    scan     {"package", "files", "state_dir", "known"}: files not as RECORD says (agent/scan.py)
A Write is {"path", "expect_sha256": sha or None (None: the file must not exist), and one of
"text" (new content), "restore_sha256" (a backup's bytes) or "delete": true}.

Answers: {"ok": true, ...} or {"ok": false, "kind": KIND, "error": message}, plus "pid".
"""

from __future__ import annotations

# Annotations only: the agent imports this module, and importing typing costs it ~4 ms per start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

PROTOCOL = 2

# Error kinds: the one thing the controller decides on (never the message text).
CONFLICT = "conflict"  # a file changed between inspect and commit: inspect again
LOCKED = "locked"  # another vpatch holds the environment's lock
OS_ERROR = "os"  # permission, space, I/O
SYNTAX = "syntax"  # the new content does not compile on the target interpreter
BACKUP = "backup"  # a backup is missing or does not have its recorded hash
INPUT = "input"  # a request field the agent refuses (bad URL, bad path)
PROTOCOL_ERROR = "protocol"  # not a request this agent understands
STATE = "state"  # the state dir, journal, lock or backups/ is a link or not ours (statedir.py)
CONFINED = "confined"  # a path to write is not a regular file in site-packages (confine.py)
KINDS = (CONFLICT, LOCKED, OS_ERROR, SYNTAX, BACKUP, INPUT, PROTOCOL_ERROR, STATE, CONFINED)

# What the controller tells the user to try next, per kind (the agent never words hints).
HINTS: Dict[str, str] = {
    CONFLICT: "the file changed while vpatch was working; run the command again",
    LOCKED: "another vpatch is working on this environment; wait and retry",
    OS_ERROR: "check permissions of site-packages and the state dir (try --sudo for "
    "root-owned envs)",
    SYNTAX: "the target interpreter is older than the patched code needs",
    BACKUP: "the backup in the state dir was changed or removed; `vpatch status` "
    "shows the file; reinstall the package to get pip's bytes back",
    STATE: "vpatch uses only state it made itself; --state-dir DIR keeps it elsewhere",
    CONFINED: "a journaled path left site-packages or went through a link: check the env",
}

# Journal actions.
APPLY = "apply"  # a spec's edits took a file from `before` to `after`
ROLLBACK = "rollback"  # a spec's edits were taken out of a file
RESET = "reset"  # the file is pip's bytes again (reinstalled): earlier entries no longer hold
SUPERSEDE = "supersede"  # as reset, after an upgrade: the entries were for another version
COMMIT = "commit"  # marker: every entry of `txn` took effect
ABORT = "abort"  # marker: `txn` was undone by a repair; its entries never took effect
ACTIONS = (APPLY, ROLLBACK, RESET, SUPERSEDE, COMMIT, ABORT)

if TYPE_CHECKING:
    Entry = Dict[str, Any]


def error(kind: str, message: str) -> Dict[str, Any]:
    return {"ok": False, "kind": kind, "error": message}


def apply_entry(
    spec: str,
    spec_hash: str,
    package: str,
    version: Optional[str],
    file: str,
    path: str,
    before: Optional[str],
    after: str,
    edits: List[Any],
    record_sha256: Optional[str] = None,
    checks: Optional[List[Dict[str, Any]]] = None,
    reason: str = "",
) -> Entry:
    """One spec's change to one file. `before` None: vpatch created the file (add_file).
    `edits` and `checks` are what `rollback ID`/`verify ID` use when no spec file is at hand;
    `version` and `record_sha256` say which release's bytes the entry was made against."""
    return {
        "action": APPLY,
        "spec": spec,
        "spec_hash": spec_hash,
        "package": package,
        "version": version,
        "record_sha256": record_sha256,
        "file": file,
        "path": path,
        "before": before,
        "after": after,
        "edits": edits,
        "checks": checks or [],
        "reason": reason,
    }


def rollback_entry(
    applied: Entry, before: Optional[str], after: Optional[str], reason: str
) -> Entry:
    """Takes the spec of `applied` out of its file (`after` None: the file was removed)."""
    keep = ("spec", "spec_hash", "package", "version", "file", "path")
    out = {k: applied.get(k) for k in keep}
    out.update(action=ROLLBACK, before=before, after=after, reason=reason)
    return out


def retire_entry(path: str, superseded: bool, version: Optional[str], reason: str) -> Entry:
    """Every earlier entry of `path` stops counting (the file is pip's bytes again)."""
    return {
        "action": SUPERSEDE if superseded else RESET,
        "path": path,
        "version": version,
        "reason": reason,
    }


def marker(txn: str, abort: bool = False) -> Entry:
    return {"action": ABORT if abort else COMMIT, "txn": txn}
