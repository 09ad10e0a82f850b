"""Append-only journal per environment, and the fold that turns it into per-file state.

One JSON object per line. A commit writes its entries (all sharing a `txn` id) BEFORE renaming
any file and a `{"action": "commit", "txn": ...}` marker after, so a crash between the two is
recognisable: entries of an uncommitted txn count only for files whose bytes already equal the
entry's after-hash (the rename happened), and are ignored otherwise (it did not).
"""

from __future__ import annotations

import json
import os
from typing import Any

from . import faults

Entry = dict[str, Any]


_ACTIONS = ("apply", "rollback", "reset")
_HASH_OR_NONE = (str, type(None))


def _shape_error(e: Any) -> str:
    """Why a parsed line is not a journal entry ("" when it is one). The journal is on disk
    where the environment's owner can write: one odd line must cost that line, not every
    command (a KeyError in the fold was a traceback for `status`, `apply` and `rollback`)."""
    if not isinstance(e, dict):
        return "not a JSON object"
    action = e.get("action")
    if action == "commit":
        return "" if isinstance(e.get("txn"), str) else "commit marker without a txn"
    if action not in _ACTIONS:
        return "unknown action %r" % (action,)
    if not isinstance(e.get("path"), str) or not e["path"]:
        return "no path"
    if not isinstance(e.get("txn", ""), str):
        return "txn is not a string"
    if action != "reset":
        if not isinstance(e.get("spec"), str) or not e["spec"]:
            return "no spec id"
        for key in ("before", "after"):
            if not isinstance(e.get(key), _HASH_OR_NONE):
                return "%s is not a sha256" % key
        for key in ("package", "file", "version", "spec_hash", "reason"):
            if not isinstance(e.get(key), _HASH_OR_NONE):
                return "%s is not a string" % key
        edits = e.get("edits", [])
        if not isinstance(edits, list) or not all(
            isinstance(x, dict) and isinstance(x.get("op"), str) for x in edits
        ):
            return "edits is not a list of edits"
    return ""


def parse(raw: bytes, warnings: list[str] | None = None) -> list[Entry]:
    """All well-formed entries. A torn line (crash mid-append) or an ill-formed one is
    skipped; ill-formed ones are named in `warnings` by line number (a torn LAST line is a
    crash, not news, and is skipped silently)."""
    out: list[Entry] = []
    lines = raw.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            if number < len(lines) and warnings is not None:
                warnings.append("journal line %d is not JSON; ignored" % number)
            continue
        why = _shape_error(obj)
        if why:
            if warnings is not None:
                warnings.append("journal line %d ignored: %s" % (number, why))
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
    blob = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries).encode()
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


def fold(entries: list[Entry], current: dict[str, str | None]) -> dict[str, dict[str, Any]]:
    """Per-file state: which specs vpatch applied, the hash the file should have, its base.

    Entries must have passed `parse` (their shape is checked there).

    `current` maps path -> sha256 of the file now (None if absent); it decides whether entries
    of a txn without a commit marker took effect (see module docstring).
    """
    committed = {e.get("txn") for e in entries if e.get("action") == "commit"}
    last_after: dict[tuple[Any, Any], Any] = {}
    for e in entries:
        if e.get("action") != "commit":
            last_after[(e.get("txn"), e.get("path"))] = e.get("after")
    state: dict[str, dict[str, Any]] = {}
    for e in entries:
        action, path = e.get("action"), e.get("path")
        if action == "commit" or not isinstance(path, str):
            continue
        if e.get("txn") not in committed and current.get(path) != last_after[(e.get("txn"), path)]:
            continue
        st = state.setdefault(path, {"applied": {}, "expected": None, "base": None})
        if action == "apply":
            if not st["applied"]:
                st["base"] = e.get("before")
            st["applied"][e["spec"]] = e
            st["expected"] = e.get("after")
        elif action == "rollback":
            st["applied"].pop(e.get("spec"), None)
            st["expected"] = e.get("after")
            if not st["applied"]:
                st["base"] = None
        elif action == "reset":
            st.update(applied={}, expected=None, base=None)
    return state
