"""The on-host agent: stdlib only, Python 3.9+, one JSON request on stdin, one JSON answer out.

It is shipped as source over the transport (see `patcher.transport.agent_bundle`) and run as
`python -I -c BOOT`, so the host needs nothing installed but Python. Ops:
    inspect  package versions, target files (bytes, sha256, RECORD hash), journal state
    commit   under the lock: re-check hashes, back up, write atomically, refresh .pyc, journal
    verify   import checks and probes in fresh interpreters
    procs    processes of this environment started before the given files last changed
    fetch    GET an http(s) URL from the host (the live serving metrics probe)
Every answer is {"ok": true, ...} or {"ok": false, "error": str, "kind": str}.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sys
import time
from typing import Any

from . import faults, fetch, fsops, journal, locate, lock, probe, procs

PROTOCOL = 1


def state_dir(req: dict[str, Any]) -> str:
    return req.get("state_dir") or os.path.join(sys.prefix, ".vpatch")


def _paths(sdir: str) -> dict[str, str]:
    return {
        "journal": os.path.join(sdir, "journal.jsonl"),
        "backups": os.path.join(sdir, "backups"),
        "lock": os.path.join(sdir, "lock"),
    }


def _journal_state(sdir: str, extra_current: dict[str, str | None]) -> dict[str, Any]:
    entries = journal.read(_paths(sdir)["journal"])
    current: dict[str, str | None] = dict(extra_current)
    for e in entries:
        p = e.get("path")
        if isinstance(p, str) and p not in current:
            current[p] = _sha_or_none(p)
    state = journal.fold(entries, current)
    for path, st in state.items():
        st["current"] = current.get(path)
        st["base_text"] = _backup_text(sdir, st["base"]) if st["applied"] else None
    return state


def _sha_or_none(path: str) -> str | None:
    try:
        return fsops.sha256_bytes(fsops.read_bytes(path))
    except OSError:
        return None


def _backup_text(sdir: str, sha: str | None) -> str | None:
    if not sha:
        return None
    try:
        return fsops.read_bytes(os.path.join(_paths(sdir)["backups"], sha)).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def op_inspect(req: dict[str, Any]) -> dict[str, Any]:
    packages: dict[str, Any] = {}
    current: dict[str, str | None] = {}
    known = set(req.get("known") or [])
    for name, files in (req.get("packages") or {}).items():
        dist = locate.distribution(name)
        if dist is None:
            packages[name] = {"version": None, "files": {}}
            continue
        hashes = locate.record_hashes(dist)
        infos = {rel: locate.file_info(dist, rel, hashes) for rel in files}
        for info in infos.values():
            if info["sha256"] in known and not info["error"]:
                info["text"], info["cached"] = None, True  # the controller has these bytes
        for info in infos.values():
            current[info["path"]] = info["sha256"]
        packages[name] = {"version": dist.version, "files": infos}
    sdir = state_dir(req)
    return {
        "python": {
            "executable": sys.executable,
            "version": "%d.%d.%d" % sys.version_info[:3],
            "prefix": sys.prefix,
        },
        "host": socket.gethostname(),
        "state_dir": sdir,
        "locked": lock.held(_paths(sdir)["lock"]),
        "packages": packages,
        "journal": _journal_state(sdir, current),
    }


def _ensure_state_dir(sdir: str) -> None:
    os.makedirs(os.path.join(sdir, "backups"), mode=0o700, exist_ok=True)


def _backup(sdir: str, data: bytes, sha: str) -> None:
    """Content-addressed, written once: the same pristine bytes are never stored twice."""
    dest = os.path.join(_paths(sdir)["backups"], sha)
    if os.path.exists(dest) and _sha_or_none(dest) == sha:
        return
    fd = os.open(dest + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(dest + ".tmp", dest)
    faults.point("backup.written")


def _new_bytes(sdir: str, w: dict[str, Any]) -> bytes:
    if w.get("restore_sha256"):
        data = fsops.read_bytes(os.path.join(_paths(sdir)["backups"], w["restore_sha256"]))
        if fsops.sha256_bytes(data) != w["restore_sha256"]:
            raise _Refused("backup %s is corrupt" % w["restore_sha256"], "backup")
        return data
    return str(w["text"]).encode("utf-8")


class _Refused(Exception):
    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def op_commit(req: dict[str, Any]) -> dict[str, Any]:
    """Write every file in `writes` or none: all hashes and syntax are checked before any write."""
    sdir = state_dir(req)
    _ensure_state_dir(sdir)
    p = _paths(sdir)
    writes = req.get("writes") or []
    with lock.Locked(p["lock"], float(req.get("lock_timeout", 60))):
        faults.point("commit.locked")
        planned = []
        for w in writes:
            path = w["path"]
            old = fsops.read_bytes(path)
            if fsops.sha256_bytes(old) != w["expect_sha256"]:
                raise _Refused("%s changed since inspection" % path, "conflict")
            new = _new_bytes(sdir, w)
            err = fsops.compile_check(new, path)
            if err:
                raise _Refused("%s: new content does not compile here: %s" % (path, err), "syntax")
            planned.append((path, old, new))
        for _path, old, _new in planned:
            _backup(sdir, old, fsops.sha256_bytes(old))
        txn = req.get("txn") or "%x-%d" % (int(time.time() * 1e6), os.getpid())
        meta = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "txn": txn,
            "user": _user(),
            "host": socket.gethostname(),
        }
        entries = [dict(e, **meta) for e in req.get("journal") or []]
        journal.append(p["journal"], entries)
        notes = []
        written_at = procs.now()  # processes started before this run the old bytes
        for path, _old, new in planned:
            fsops.atomic_write(path, new)
            note = fsops.refresh_bytecode(path)
            faults.point("commit.bytecode")
            if note:
                notes.append(note)
        journal.append(p["journal"], [{"action": "commit", "txn": txn}])
        faults.point("commit.done")
    restart = procs.scan(written_at) if planned else []
    return {
        "txn": txn,
        "written": [w[0] for w in planned],
        "notes": notes,
        "restart_required": restart,
    }


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid())


def op_verify(req: dict[str, Any]) -> dict[str, Any]:
    return {"checks": probe.run(req.get("checks") or [])}


def op_procs(req: dict[str, Any]) -> dict[str, Any]:
    """Processes of this environment that started before the newest of `paths` was written."""
    mtimes = []
    for path in req.get("paths") or []:
        try:
            mtimes.append(os.stat(path).st_mtime)
        except OSError:
            continue
    if not mtimes:
        return {"restart_required": []}
    return {"restart_required": procs.scan(procs.from_wall(max(mtimes)))}


def op_fetch(req: dict[str, Any]) -> dict[str, Any]:
    try:
        return fetch.fetch(
            str(req.get("url", "")),
            float(req.get("timeout", 10)),
            int(req.get("max_bytes", fetch.DEFAULT_MAX_BYTES)),
        )
    except fetch.BadURL as exc:
        raise _Refused(str(exc), "input") from None


OPS = {
    "inspect": op_inspect,
    "commit": op_commit,
    "verify": op_verify,
    "procs": op_procs,
    "fetch": op_fetch,
}


def handle(req: dict[str, Any]) -> dict[str, Any]:
    if req.get("fault"):
        faults.arm(str(req["fault"]))
    op = OPS.get(req.get("op", ""))
    if op is None:
        return {"ok": False, "kind": "protocol", "error": "unknown op %r" % req.get("op")}
    try:
        out = op(req)
    except _Refused as exc:
        return {"ok": False, "kind": exc.kind, "error": str(exc)}
    except TimeoutError as exc:
        return {"ok": False, "kind": "locked", "error": str(exc)}
    except OSError as exc:
        where = " (%s)" % exc.filename if exc.filename else ""
        return {"ok": False, "kind": "os", "error": "%s%s" % (exc.strerror or exc, where)}
    out["ok"] = True
    out["protocol"] = PROTOCOL
    return out


def main() -> None:
    """Read the request from stdin, write one JSON document to stdout."""
    try:
        req = json.loads(sys.stdin.read())
    except ValueError as exc:
        res: dict[str, Any] = {"ok": False, "kind": "protocol", "error": "bad request: %s" % exc}
    else:
        res = handle(req)
    sys.stdout.write(json.dumps(res))
    sys.stdout.flush()
