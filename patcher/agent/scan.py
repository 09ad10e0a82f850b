"""`scan`: which files of an installed distribution are not what pip installed (`vpatch diff`).

Stdlib only, Python 3.9+. Request: {"package", "files": [rel...] (empty: all), "state_dir",
"known": [sha256...], "max_bytes"?, "max_text"?}. Answer: {"version", "root", "files": [...],
"skipped": [...], "journal": {path: {"base", "base_text"}}}, where each file is
{"rel", "path", "state": "modified" | "missing" | "added", "sha256", "record_sha256", "text"}:

- modified: listed in RECORD with a sha256 the file no longer has;
- missing: listed in RECORD, gone from disk;
- added: a file in one of the directories of the package's files that RECORD does not list
  (bytecode and `__pycache__` are not counted; other distributions' files in a shared
  namespace directory are not ours to list).

Reads are bounded: a file larger than `max_bytes` (default 16 MiB: compiled extensions) is
never read, only named in `skipped`; text travels only up to `max_text` bytes, only when it
is UTF-8 and only when the controller does not already hold that hash (`known`). For a file
the journal names, the backup of its base (what vpatch found before patching) comes along:
the diff against it is "vpatch's own".
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from . import journal, locate, statedir

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_TEXT = 4 * 1024 * 1024
_CHUNK = 1024 * 1024


def _sha_bounded(path: str, limit: int) -> tuple[str | None, int]:
    """(sha256, size) of a file, or (None, size) when it is larger than `limit`."""
    size = os.stat(path).st_size
    if size > limit:
        return None, size
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(_CHUNK)
            if not block:
                break
            h.update(block)
    return h.hexdigest(), size


def _text(path: str, size: int, limit: int) -> str | None:
    if size > limit:
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _own_dirs(record: dict[str, Any]) -> list[str]:
    """The directories the distribution's files are in (not its dist-info, not `..` scripts,
    not the top of site-packages). Only these, not their whole trees: a namespace directory
    (`nvidia/`, `google/`) holds other distributions' files."""
    dirs = set()
    for rel in record:
        parts = rel.split("/")
        if len(parts) < 2 or parts[0] in ("..", "") or parts[0].endswith((".dist-info", ".data")):
            continue
        if "__pycache__" in parts:
            continue
        dirs.add("/".join(parts[:-1]))
    return sorted(dirs)


def _added(root: str, record: dict[str, Any], wanted: set[str]) -> list[str]:
    out = []
    for d in _own_dirs(record):
        try:
            names = sorted(os.listdir(os.path.join(root, *d.split("/"))))
        except OSError:
            continue
        for name in names:
            rel = d + "/" + name
            if rel in record or name.endswith((".pyc", ".pyo")) or (wanted and rel not in wanted):
                continue
            if os.path.isfile(os.path.join(root, *rel.split("/"))):
                out.append(rel)
    return out


def scan(req: dict[str, Any], sdir: str) -> dict[str, Any]:
    dist = locate.distribution(str(req.get("package") or ""))
    if dist is None:
        return {"version": None, "root": None, "files": [], "skipped": [], "journal": {}}
    max_bytes = int(req.get("max_bytes") or DEFAULT_MAX_BYTES)
    max_text = int(req.get("max_text") or DEFAULT_MAX_TEXT)
    known = set(req.get("known") or [])
    wanted = set(req.get("files") or [])
    record = dict(dist.record or {})
    found: list[dict[str, Any]] = []
    skipped: list[str] = []

    def add(rel: str, path: str, state: str, sha: str | None, size: int) -> None:
        text = None
        if sha is not None and sha not in known:
            text = _text(path, size, max_text)
        found.append(
            {
                "rel": rel,
                "path": path,
                "state": state,
                "sha256": sha,
                "record_sha256": record.get(rel),
                "text": text,
            }
        )

    def look(rel: str, want: str | None) -> None:
        """Hash the file (bounded); report it when it is not RECORD's (`want` None: added)."""
        path = os.path.join(dist.root, *rel.split("/"))
        try:
            sha, size = _sha_bounded(path, max_bytes)
        except OSError:
            sha, size = None, 0
        if sha is None:
            skipped.append(rel)
        elif sha != want:
            add(rel, path, "added" if want is None else "modified", sha, size)

    for rel in sorted(record):
        want = record[rel]
        if want is None or rel.startswith("../") or (wanted and rel not in wanted):
            continue  # RECORD's own line and .pyc files carry no hash
        path = os.path.join(dist.root, *rel.split("/"))
        if not os.path.lexists(path):
            add(rel, path, "missing", None, 0)
            continue
        look(rel, want)
    if dist.record is not None:
        for rel in _added(dist.root, record, wanted):
            look(rel, None)
    return {
        "version": dist.version,
        "root": dist.root,
        "files": found,
        "skipped": skipped,
        "journal": _bases(sdir, {f["path"]: f["sha256"] for f in found}, known, max_text),
    }


def _bases(
    sdir: str, current: dict[str, str | None], known: set[str], max_text: int
) -> dict[str, Any]:
    """For each found file the journal names: the sha256 of its base and, unless the
    controller holds it, the base's text (from backups/, verified against its name). The state
    dir is read as every op reads it (statedir: no links followed, only our own files)."""
    state = statedir.open_state(sdir)
    if state is None:
        return {}
    with state:
        entries = journal.parse(state.read_journal())
        if not entries:
            return {}
        folded = journal.fold(entries, dict(current))
        out: dict[str, Any] = {}
        for path, st in folded.items():
            if path not in current or not st.get("applied"):
                continue
            base = st.get("base")
            text = None
            if base and base not in known:
                try:
                    data = state.read_backup(str(base))
                except (OSError, ValueError):  # corrupt: the wheel's bytes are the pristine side
                    data = None
                if data is not None and len(data) <= max_text:
                    try:
                        text = data.decode("utf-8")
                    except UnicodeDecodeError:
                        text = None
            out[path] = {"base": base, "base_text": text, "created": bool(st.get("created"))}
        return out
