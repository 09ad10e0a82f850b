"""Keep the journal proportional to the current state: compaction and backup collection.

Why: the journal is append-only, and every reinstall + `ensure` cycle (a crash-looping pod, a
re-synced venv volume) appends a retirement and the specs' entries again. Unbounded, ~36 KB a
cycle with the catalog's two vLLM specs reached the 64 MiB read cap (statedir) after ~1,850
cycles, and every command on that env failed. So every commit that ends with the journal past
COMPACT_AT (and at least half of it dead) rewrites it with only the lines that are still live,
and every commit that retired something removes the backups no live line names.

What is live, per file: its lines since the last time no spec was applied to it (the fold's
`base` is the first of them, `expected` the last, and the fold's order of specs needs them all),
plus the commit marker of every transaction one of them belongs to. Everything before that point
(a reset, a supersede, a rollback of the last spec) can no longer change the fold. Lines are kept
VERBATIM: whatever fields they carry, a line is kept or dropped whole; a line of an action this
module does not know is kept. And the rewrite is made only when folding the kept lines gives
exactly what folding the whole journal gives; otherwise the journal stays as it is.

Crash safety: compaction runs under the environment's lock, after the commit's marker, and only
when no transaction is unmarked. The new journal goes to a temp file in the state dir (by its
descriptor), fsync'ed, renamed over `journal.jsonl`, and the directory fsync'ed; a crash before
the rename leaves the old journal (the temp file is swept by the next compaction), a crash after
it the new one, which folds the same. Backups are removed only after the rename, so a backup is
never missing while a journal that names it is in place; any backup a kept line names (a base,
a before or after hash, whatever field holds it) is kept. Fault points: POINTS.
"""

from __future__ import annotations

import os
import stat
import time

from . import faults, fsops, journal, protocol, statedir, wire

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# A journal this large is rewritten when at least half of it is dead: the journal then stays
# under COMPACT_AT plus one commit, or twice what is live. TEST-ONLY override (local agents):
# VPATCH_AGENT_COMPACT_AT=<bytes>.
COMPACT_AT = int(os.environ.get("VPATCH_AGENT_COMPACT_AT") or 128 << 10)

# The steps of one compaction, in order (faults.py; tests kill the agent at each): the first
# four are statedir.replace_entry's (REPLACE_STEPS), under `compact.`.
POINTS = (
    "compact.temp_written",  # the kept lines in a temp file in the state dir, not fsync'ed
    "compact.temp_synced",  # temp file fsync'ed; the old journal still in place
    "compact.renamed",  # new journal renamed over the old one; directory not yet fsync'ed
    "compact.dir_synced",  # the rename is durable; no backup removed yet
    "compact.collected",  # retired backups removed
)

_MARKERS = (protocol.COMMIT, protocol.ABORT)
_RETIRING = (protocol.ROLLBACK, protocol.RESET, protocol.SUPERSEDE)


def retires(entries: list[dict[str, Any]]) -> bool:
    """Whether a commit's entries take something out (a rollback, a reset, a supersede): the
    backups the journal named before may be no one's now."""
    return any(e.get("action") in _RETIRING for e in entries)


def live(raw: bytes) -> tuple[list[bytes], set[str]] | None:
    """(the journal's live lines, verbatim and in order; every sha256 they name), or None when
    this cannot be decided now: a transaction without a marker (a crash; the repair decides
    it first), or a fold of the kept lines that would differ from the whole journal's."""
    lines: list[tuple[bytes, dict[str, Any]]] = []
    steps: list[bytes] = []
    verified: list[tuple[bytes, dict[str, Any]]] = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            obj = wire.loads(line.decode("utf-8", "surrogatepass"))
        except ValueError:
            continue  # a torn line: the fold skips it too
        if journal._shape_error(obj):
            continue  # ill-formed: the fold skips it (and warned about it on every read)
        if journal.is_step(obj):
            steps.append(line)  # a rollout step: the newest are kept (journal.STEPS_KEPT)
            continue
        if journal.is_verified(obj):
            verified.append((line, obj))  # kept while its transaction's lines are
            continue
        lines.append((line, obj))
    marks = {e["txn"]: e["action"] for _, e in lines if e["action"] in _MARKERS}
    if any(e.get("txn") not in marks for _, e in lines if e["action"] not in _MARKERS):
        return None
    start: dict[str, int | None] = {}  # path -> index of its first live line (None: none)
    applied: dict[str, set[Any]] = {}
    counted = [
        i
        for i, (_, e) in enumerate(lines)
        if e["action"] not in _MARKERS and marks.get(e.get("txn")) == protocol.COMMIT
    ]
    for i in counted:
        e = lines[i][1]
        path, action = e["path"], e["action"]
        specs = applied.setdefault(path, set())
        if action == protocol.APPLY:
            if not specs:
                start[path] = i
            specs.add(e.get("spec"))
        elif action == protocol.ROLLBACK:
            specs.discard(e.get("spec"))
            if not specs:
                start[path] = None
        elif action in (protocol.RESET, protocol.SUPERSEDE):
            specs.clear()
            start[path] = None
    keep = set()
    for i in counted:
        e = lines[i][1]
        first = start.get(e["path"])
        if e["action"] not in _KNOWN or (first is not None and i >= first):
            keep.add(i)
    txns = {lines[i][1].get("txn") for i in keep}
    keep |= {
        i
        for i, (_, e) in enumerate(lines)
        if e["action"] == protocol.COMMIT and e.get("txn") in txns
    }
    kept = [lines[i] for i in sorted(keep)]
    if _live_fold([e for _, e in kept]) != _live_fold([e for _, e in lines]):
        return None
    names: set[str] = set()
    for _, e in kept:
        _hashes(e, names)
    checked = [line for line, e in verified if e["txn"] in txns]
    return [line for line, _ in kept] + checked + steps[-journal.STEPS_KEPT :], names


_KNOWN = (protocol.APPLY, protocol.ROLLBACK, protocol.RESET, protocol.SUPERSEDE)


def _live_fold(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The fold, as commands read it: files with a spec applied (or with state the fold keeps
    beyond the four fields it always has), everything marked (no current bytes needed)."""
    out = {}
    for path, st in journal.fold(entries, {}).items():
        if st["applied"] or set(st) - {"applied", "expected", "base", "created"}:
            out[path] = st
    return out


def _hashes(value: Any, into: set[str]) -> None:
    """Every sha256-shaped string anywhere in a journal entry (a backup it may need)."""
    if isinstance(value, str):
        if statedir.is_sha256(value):
            into.add(value)
    elif isinstance(value, dict):
        for v in value.values():
            _hashes(v, into)
    elif isinstance(value, list):
        for v in value:
            _hashes(v, into)


def after_commit(state: statedir.State, retired: bool, keep: Any = ()) -> list[str]:
    """Under the lock, once a commit's marker is on disk: rewrite the journal when it is past
    COMPACT_AT and at least half dead; after a retirement (or a rewrite), remove the backups no
    live line names (nor an entry of `keep`: the commit's own, while the controller may still
    undo it). Notes for the answer; a failure (a full disk) leaves the journal as it
    was and is a note, never a failed commit: the commit itself is complete."""
    notes = [
        "removed %s (left by an interrupted compaction)" % p
        for p in fsops.sweep(state.fd, time.time(), state.path)
    ]
    try:
        size = os.stat(statedir.JOURNAL, dir_fd=state.fd, follow_symlinks=False).st_size
    except OSError:
        return notes
    if size < COMPACT_AT and not retired:
        return notes
    raw = state.read_journal()
    got = live(raw)
    if got is None:
        return notes
    kept, names = got
    for e in keep:
        _hashes(e, names)
    if len(raw) >= COMPACT_AT:
        data = b"".join(line + b"\n" for line in kept)
        if 2 * len(data) <= len(raw):
            try:
                replace_journal(state, data)
            except OSError as exc:
                return [*notes, "journal not compacted: %s" % (exc.strerror or exc)]
            notes.append("journal compacted: %d -> %d bytes" % (len(raw), len(data)))
    removed = collect(state, names)
    faults.point("compact.collected")
    if removed:
        notes.append("removed %d backup(s) no journal entry needs any more" % removed)
    return notes


def replace_journal(state: statedir.State, data: bytes) -> None:
    """`data` becomes the journal, atomically (statedir.replace_entry: temp file, fsync,
    rename, directory fsync, all by the state dir's descriptor; fault points POINTS); owned
    like the journal it replaces, 0600."""
    old = state.open_file(statedir.JOURNAL, os.O_RDONLY)
    try:
        owner = os.fstat(old)
    finally:
        os.close(old)
    statedir.replace_entry(
        state.fd, statedir.JOURNAL, data, (owner.st_uid, owner.st_gid), points="compact"
    )


def collect(state: statedir.State, keep: set[str]) -> int:
    """Remove every backup (a regular file named by a sha256) not in `keep`; how many."""
    fd = state.backups()
    if fd < 0:
        return 0
    removed = 0
    for name in os.listdir(fd):
        if not statedir.is_sha256(name) or name in keep:
            continue
        try:
            if stat.S_ISREG(os.lstat(name, dir_fd=fd).st_mode):
                os.unlink(name, dir_fd=fd)
                removed += 1
        except OSError:
            continue
    if removed:
        os.fsync(fd)
    return removed
