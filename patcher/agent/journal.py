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


def read(path: str) -> list[Entry]:
    """All entries; a torn last line (crash mid-append) is skipped, never fatal."""
    out: list[Entry] = []
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except (FileNotFoundError, NotADirectoryError):  # no journal yet (or no state dir at all)
        return out
    for line in raw.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def append(path: str, entries: list[Entry], point: str = "journal.appended") -> None:
    """Append entries with one write + fsync; a partial line is tolerated by `read`.

    `point` names the fault point between the write and the fsync (entries vs. the commit
    marker are different steps of a commit)."""
    if not entries:
        return
    blob = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        # A crash can leave a torn last line; start ours on a fresh line so it stays parseable.
        if os.fstat(fd).st_size:
            with open(path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    os.write(fd, b"\n")
        os.write(fd, blob)
        faults.point(point)
        os.fsync(fd)
    finally:
        os.close(fd)


def fold(entries: list[Entry], current: dict[str, str | None]) -> dict[str, dict[str, Any]]:
    """Per-file state: which specs vpatch applied, the hash the file should have, its base.

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
