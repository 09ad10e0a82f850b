"""Append-only journal per environment, and the fold that turns it into per-file state.

One JSON object per line. A commit writes its entries (all sharing a `txn` id) BEFORE renaming
any file and a `{"action": "commit", "txn": ...}` marker after, so a crash between the two is
recognisable: entries of an uncommitted txn count only for files whose bytes already equal the
entry's after-hash (the rename happened), and are ignored otherwise (it did not).
"""

from __future__ import annotations

import os

from . import faults, protocol, wire

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    Entry = dict[str, Any]


_ACTIONS = protocol.ACTIONS
_HASH_OR_NONE = (str, type(None))


def _shape_error(e: Any) -> str:
    """Why a parsed line is not a journal entry ("" when it is one). The journal is on disk
    where the environment's owner can write: one odd line must cost that line, not every
    command (a KeyError in the fold was a traceback for `status`, `apply` and `rollback`)."""
    if not isinstance(e, dict):
        return "not a JSON object"
    action = e.get("action")
    if action == protocol.ROLLOUT:
        return _step_error(e)
    if action == protocol.VERIFIED:
        ok = isinstance(e.get("txn"), str) and isinstance(e.get("spec"), str)
        return "" if ok else "verified entry without a txn and a spec"
    if action in (protocol.COMMIT, protocol.ABORT):
        return "" if isinstance(e.get("txn"), str) else "marker without a txn"
    if action not in _ACTIONS:
        return "unknown action %r" % (action,)
    if not isinstance(e.get("path"), str) or not e["path"]:
        return "no path"
    if not isinstance(e.get("txn", ""), str):
        return "txn is not a string"
    if action in (protocol.APPLY, protocol.ROLLBACK):
        if not isinstance(e.get("spec"), str) or not e["spec"]:
            return "no spec id"
        for key in ("before", "after"):
            if not isinstance(e.get(key), _HASH_OR_NONE):
                return "%s is not a sha256" % key
        for key in ("package", "file", "version", "spec_hash", "reason", "versions"):
            if not isinstance(e.get(key), _HASH_OR_NONE):
                return "%s is not a string" % key
        if not isinstance(e.get("base"), _HASH_OR_NONE) or not isinstance(
            e.get("level"), _HASH_OR_NONE
        ):
            return "base or level is not a string"
        relies = e.get("relies_on", [])
        if not isinstance(relies, list) or not all(isinstance(x, str) for x in relies):
            return "relies_on is not a list of spec ids"
        edits = e.get("edits", [])
        if not isinstance(edits, list) or not all(
            isinstance(x, dict) and isinstance(x.get("op"), str) for x in edits
        ):
            return "edits is not a list of edits"
    return ""


def is_step(e: Any) -> bool:
    """A `vpatch rollout` step entry (protocol.step_entry): no file, no transaction."""
    return isinstance(e, dict) and e.get("action") == protocol.ROLLOUT


def is_verified(e: Any) -> bool:
    """A VERIFIED entry (protocol.verified_entry): names a txn and a spec, no file."""
    return isinstance(e, dict) and e.get("action") == protocol.VERIFIED


def unverified(entries: list[Entry], verified: list[Entry], state: dict[str, Any]) -> list[Any]:
    """[spec, txn] of every spec the fold says is applied whose entry was journaled with its
    checks pending and no VERIFIED entry names that txn and spec (protocol.VERIFIED)."""
    done = {(e["txn"], e["spec"]) for e in verified}
    out = set()
    for st in state.values():
        for sid, e in st["applied"].items():
            if e.get("verify") == protocol.PENDING and (e.get("txn"), sid) not in done:
                out.add((sid, str(e.get("txn"))))
    return [list(x) for x in sorted(out)]


def _step_error(e: Any) -> str:
    """Why a rollout step entry is ill-formed ("" when it is not). Checked by the agent before
    it appends one and by the controller on every one it reads back (the host may lie)."""
    run = e.get("run")
    if not isinstance(run, str) or not 0 < len(run) <= 64 or not run.isalnum():
        return "run is not an id"
    if e.get("step") not in protocol.ROLLOUT_STEPS:
        return "unknown rollout step %r" % (e.get("step"),)
    if not isinstance(e.get("ok"), bool):
        return "ok is not a boolean"
    if e.get("verdict", None) not in (None, *protocol.ROLLOUT_VERDICTS):
        return "unknown rollout verdict"
    specs = e.get("specs")
    if not isinstance(specs, list) or not all(isinstance(x, str) for x in specs):
        return "specs is not a list of spec ids"
    for key in ("detail", "started", "ts"):
        if not isinstance(e.get(key, ""), str) or len(e.get(key, "")) > 1000:
            return "%s is not a short string" % key
    seconds = e.get("seconds", 0)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return "seconds is not a number"
    return _step_extras_error(e)


def _step_extras_error(e: Any) -> str:
    """Why a step entry's optional parts are ill-formed: `measures` and `seen` objects,
    `undecided` and `released` booleans ("" when they are well-formed or absent)."""
    for key in ("measures", "seen"):
        if not isinstance(e.get(key, {}), dict):
            return "%s is not an object" % key
    for key in ("undecided", "released"):
        if not isinstance(e.get(key, False), bool):
            return "%s is not a boolean" % key
    return _steer_error(e.get("steer"))


def _steer_error(s: Any) -> str:
    """Why a step entry's `steer` note (protocol.steer_entry) is ill-formed ("" when it is
    well-formed or absent)."""
    if s is None:
        return ""
    if not isinstance(s, dict) or s.get("verb") not in protocol.STEER_VERBS:
        return "steer is not a steer note"
    for key in ("seq", "uid"):
        n = s.get(key)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            return "steer %s is not a count" % key
    for key in ("user", "at"):
        if not isinstance(s.get(key), str) or len(s[key]) > protocol.STEER_USER_MAX:
            return "steer %s is not a short string" % key
    return ""


STEPS_KEPT = 64  # rollout step entries a compaction keeps (the newest), and inspect returns


def last_run(steps: list[Entry]) -> list[Entry]:
    """The step entries of the newest rollout run the journal records, oldest first."""
    if not steps:
        return []
    run = steps[-1]["run"]
    return [e for e in steps if e["run"] == run][-STEPS_KEPT:]


def parse(
    raw: bytes,
    warnings: list[str] | None = None,
    steps: list[Entry] | None = None,
    verified: list[Entry] | None = None,
) -> list[Entry]:
    """All well-formed file entries and markers. A torn line (crash mid-append) or an
    ill-formed one is skipped; ill-formed ones are named in `warnings` by line number (a torn
    LAST line is a crash, not news, and is skipped silently). Rollout step entries are never
    among them (no fold, repair or compaction of files reads them): they go to `steps`."""
    out: list[Entry] = []
    lines = raw.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = wire.loads(line.decode("utf-8", "surrogatepass"))
        except ValueError:
            if number < len(lines) and warnings is not None:
                warnings.append("journal line %d is not JSON; ignored" % number)
            continue
        why = _shape_error(obj)
        if why:
            if warnings is not None:
                warnings.append("journal line %d ignored: %s" % (number, why))
            continue
        if is_step(obj):
            if steps is not None:
                steps.append(obj)
            continue
        if is_verified(obj):  # no file: the fold never reads it (see `unverified`)
            if verified is not None:
                verified.append(obj)
            continue
        out.append(obj)
    return out


def append(fd: int, entries: list[Entry], point: str = "journal.appended") -> None:
    """Append entries to the open journal (O_APPEND), every byte, then fsync.

    A short write (a full disk or a file size limit stops a write partway without an error) is
    continued until it raises; on any failure the journal is cut back to where it was, so no
    torn line is left for the next append, and the error is raised: the caller has renamed
    nothing yet (entries), or must put its files back (marker). `point` names the fault
    point between the write and the fsync (entries vs. the commit marker)."""
    if not entries:
        return
    blob = "".join(wire.dumps(e, sort_keys=True) + "\n" for e in entries).encode()
    size = os.fstat(fd).st_size
    try:
        # A crash can leave a torn last line; start ours on a fresh line so it stays parseable.
        if size and os.pread(fd, 1, size - 1) != b"\n":
            blob = b"\n" + blob
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view) :]
        faults.point(point)
        os.fsync(fd)
    except OSError:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass
        raise


def _txn_files(entries: list[Entry]) -> dict[Any, dict[str, tuple[Any, Any]]]:
    """txn -> path -> (before of its first entry, after of its last): what the txn did to it."""
    out: dict[Any, dict[str, tuple[Any, Any]]] = {}
    for e in entries:
        if e.get("action") in (protocol.COMMIT, protocol.ABORT):
            continue
        files = out.setdefault(e.get("txn"), {})
        first = files.get(e["path"], (e.get("before"), None))[0]
        files[e["path"]] = (first, e.get("after"))
    return out


def _took_effect(
    entries: list[Entry], current: dict[str, str | None]
) -> tuple[set[Any], list[dict[str, Any]]]:
    """The txns whose entries count, and the unmarked ones (see `pending`).

    A txn with a commit marker counts; one with an abort marker never does. One without either
    was cut short: it counts when EVERY file it names already has its after-hash (all renames
    happened, only the marker is missing), and not at all otherwise, so a multi-file patch is
    never taken as half applied."""
    marked = {
        e.get("txn"): e["action"]
        for e in entries
        if e["action"] in (protocol.COMMIT, protocol.ABORT)
    }
    counted: set[Any] = set()
    half: list[dict[str, Any]] = []
    for txn, files in _txn_files(entries).items():
        mark = marked.get(txn)
        if mark == protocol.COMMIT:
            counted.add(txn)
            continue
        if mark == protocol.ABORT:
            continue
        done = sorted(p for p, (_b, a) in files.items() if current.get(p) == a)
        if len(done) == len(files):
            counted.add(txn)
        half.append({"txn": txn, "files": files, "done": done})
    return counted, half


def unmarked_paths(entries: list[Entry]) -> set[str]:
    """The files named by transactions without a marker: the only ones `pending` looks at."""
    marked = {e.get("txn") for e in entries if e["action"] in (protocol.COMMIT, protocol.ABORT)}
    return {
        str(e["path"])
        for e in entries
        if e["action"] not in (protocol.COMMIT, protocol.ABORT) and e.get("txn") not in marked
    }


def pending(entries: list[Entry], current: dict[str, str | None]) -> list[dict[str, Any]]:
    """Transactions without a marker: a crash between the journal and the marker. `done` lists
    the files that have the txn's after-hash: none, the txn never took effect (it gets an abort
    marker); all, it only lacks its commit marker; some, it is half-written and the repair puts
    the done files back to their before-bytes (an all-or-none patch must never stay half)."""
    return _took_effect(entries, current)[1]


def fold(entries: list[Entry], current: dict[str, str | None]) -> dict[str, dict[str, Any]]:
    """Per-file state: which specs vpatch applied, the hash the file should have, its base.

    Entries must have passed `parse` (their shape is checked there).

    `current` maps path -> sha256 of the file now (None if absent); it decides whether entries
    of a txn without a marker took effect (see `_took_effect`). `base` None with `created` set:
    vpatch created the file (add_file), so taking every spec out removes it. An apply entry
    with a `base` moves the base there (protocol.apply_entry says when).
    """
    counted, _half = _took_effect(entries, current)
    state: dict[str, dict[str, Any]] = {}
    for e in entries:
        action, path = e["action"], e.get("path")
        if action in (protocol.COMMIT, protocol.ABORT) or e.get("txn") not in counted:
            continue
        assert isinstance(path, str)
        st = state.setdefault(
            path, {"applied": {}, "expected": None, "base": None, "created": False}
        )
        if action == protocol.APPLY:
            if not st["applied"]:
                st["base"] = e.get("before")
                st["created"] = e.get("before") is None
            if isinstance(e.get("base"), str):  # a new base: vpatch's edits out, hand edits in
                st["base"] = e["base"]
                st["created"] = False
            st["applied"][e["spec"]] = e
            st["expected"] = e.get("after")
        elif action == protocol.ROLLBACK:
            st["applied"].pop(e.get("spec"), None)
            st["expected"] = e.get("after")
            if not st["applied"]:
                st.update(base=None, created=False)
        elif action in (protocol.RESET, protocol.SUPERSEDE):
            st.update(applied={}, expected=None, base=None, created=False)
    return state
