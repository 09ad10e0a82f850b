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

Reads are bounded and go through descriptors (fdwalk.py): from the distribution's root, no
component a link, the file itself a regular file that is not a hard link from elsewhere, and a
RECORD line with '..' or an empty component is not followed. What is refused so, or is larger
than `max_bytes` (default 16 MiB: compiled extensions), is never read, only named in
`skipped` (a package file linked to a root-only file must not ship that file's text to the
controller). Text travels only up to `max_text` bytes, only when it is UTF-8 and only when the
controller does not already hold that hash (`known`). For a file
the journal names, the backup of its base (what vpatch found before patching) comes along:
the diff against it is "vpatch's own".
"""

from __future__ import annotations

import os
import stat

from . import fdwalk, fsops, hashed, journal, locate, statedir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_TEXT = 4 * 1024 * 1024


class _Skip(Exception):
    """The file is not read: refused by the walk, or larger than the bound."""


def _read(top: fdwalk.Dir, rel: str, limit: int) -> bytes | None:
    """The file's bytes through the walk from the distribution's root; None when it does not
    exist; _Skip when the walk refuses it or it is larger than `limit`."""
    try:
        names = fdwalk.parts(rel)
        where, name = fdwalk.reach(top, names)
    except FileNotFoundError:
        return None
    except OSError:
        raise _Skip() from None
    with where:
        if where.lstat(name) is None:
            return None
        try:
            return where.read(name, limit)[0]
        except FileNotFoundError:
            return None
        except OSError:  # fdwalk.Unsafe, fdwalk.TooBig, unreadable
            raise _Skip() from None


def _text(data: bytes, limit: int) -> str | None:
    if len(data) > limit:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
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


def _added(top: fdwalk.Dir, record: dict[str, Any], wanted: set[str]) -> list[str]:
    out = []
    for d in _own_dirs(record):
        try:
            with top.walk(fdwalk.parts(d)) as where:
                names = sorted(where.listdir())
                for name in names:
                    rel = d + "/" + name
                    if rel in record or name.endswith((".pyc", ".pyo")):
                        continue
                    if wanted and rel not in wanted:
                        continue
                    st = where.lstat(name)
                    if st is not None and stat.S_ISREG(st.st_mode):
                        out.append(rel)
        except OSError:
            continue
    return out


def scan(req: dict[str, Any], sdir: str) -> dict[str, Any]:
    dist = locate.distribution(str(req.get("package") or ""))
    if dist is None:
        return {"version": None, "root": None, "files": [], "skipped": [], "journal": {}}
    with fdwalk.open_root(dist.root) as top:
        return _scan(req, sdir, dist, top)


def _scan(req: dict[str, Any], sdir: str, dist: locate.Dist, top: fdwalk.Dir) -> dict[str, Any]:
    max_bytes = int(req.get("max_bytes") or DEFAULT_MAX_BYTES)
    max_text = int(req.get("max_text") or DEFAULT_MAX_TEXT)
    known = set(req.get("known") or [])
    wanted = set(req.get("files") or [])
    record = dict(dist.record or {})
    found: list[dict[str, Any]] = []
    skipped: list[str] = []

    def add(rel: str, state: str, data: bytes | None) -> None:
        sha = fsops.sha256_bytes(data) if data is not None else None
        text = None
        if data is not None and sha not in known:
            text = _text(data, max_text)
        found.append(
            {
                "rel": rel,
                "path": os.path.join(dist.root, *rel.split("/")),
                "state": state,
                "sha256": sha,
                "record_sha256": record.get(rel),
                "text": text,
            }
        )

    todo = [
        rel
        for rel in sorted(record)  # RECORD's own line and .pyc files carry no hash
        if record[rel] is not None and not rel.startswith("../") and (not wanted or rel in wanted)
    ]
    checked = hashed.check(top, [(rel, str(record[rel])) for rel in todo], max_bytes)
    for rel in todo:
        state, data = checked[rel]
        if state == hashed.SKIPPED:
            skipped.append(rel)
        elif state == hashed.MISSING:
            add(rel, "missing", None)
        elif state == hashed.MODIFIED:
            add(rel, "modified", data)
    if dist.record is not None:
        for rel in _added(top, record, wanted):
            try:
                data = _read(top, rel, max_bytes)
            except _Skip:
                skipped.append(rel)
                continue
            if data is not None:
                add(rel, "added", data)
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
