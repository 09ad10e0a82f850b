"""The on-host agent: stdlib only, Python 3.9+, JSON requests on stdin, JSON answers on stdout.

It is shipped as source over the transport (see `patcher.transport.agent_bundle`) and run as
`python -I -c BOOT`, so the host needs nothing installed but Python. After the bundle line, each
stdin line is one request and gets exactly one answer line; EOF ends the process. A transport
keeps one such process per host for a whole run (an "agent session"); a one-shot caller (Ray,
Ansible) sends the bundle line, one request (no newline needed) and EOF. Ops:
    inspect  package versions, target files (bytes, sha256, RECORD hash), journal state and,
             for verify, the procs answer for the files of the given spec ids (one call less)
    commit   under the lock: re-check hashes, back up, write atomically, refresh .pyc, journal
    verify   import checks and probes in fresh interpreters
    procs    processes of this environment started before the given files last changed
    fetch    GET an http(s) URL from the host (the live serving metrics probe)
    scan     files of a distribution that are not as its RECORD says (`vpatch diff`; scan.py)
    restart  run the restart command; health: poll a URL until 200 (`vpatch rollout`; restart.py)
Every answer is {"ok": true, ...} or {"ok": false, "error": str, "kind": str}, with the agent's
"pid" (so a caller can tell sessions apart).

Nothing a request sets may outlive it: `handle` re-arms the test fault point from each request
(or disarms it) and drops importlib.metadata's directory caches (a pip install between two
requests must be seen); every other module keeps no state between calls (locate reads
dist-info afresh, locks and temp files are closed by the op that opened them).
"""

from __future__ import annotations

import os
import stat
import sys
import time

# Only what every op needs is imported here; each op imports the rest itself. The agent is a
# fresh interpreter per host and run (one-shot callers: per call), so its imports are paid that
# often (the lazy layout halved an inspect call's CPU; see bench/).
from . import confine, faults, fdwalk, fsops, journal, lock, protocol, statedir, wire

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROTOCOL = protocol.PROTOCOL


def state_dir(req: dict[str, Any]) -> str:
    return req.get("state_dir") or os.path.join(sys.prefix, ".vpatch")


def _paths(sdir: str) -> dict[str, str]:
    return {
        "journal": os.path.join(sdir, "journal.jsonl"),
        "backups": os.path.join(sdir, "backups"),
        "lock": os.path.join(sdir, "lock"),
    }


def _journal_state(
    sdir: str,
    extra_current: dict[str, str | None],
    known: frozenset[str] = frozenset(),
    warnings: list[str] | None = None,
    orphans: dict[str, list[str]] | None = None,
    steps: list[journal.Entry] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Per journaled file: what vpatch applied, the hashes, the pristine text (backup) and,
    for files not among the inspected packages' (whose text travels there), the current text
    unless the controller already holds it (`known`): rollback's diff needs it, and without it
    the controller would rebuild it by re-running every edit (importing libcst for a diff).

    Ill-formed lines and entries whose path is not a regular file in this environment's
    site-packages are left out, each with a line in `warnings` (see journal.parse, confine).

    Also per file the installed version of its package and RECORD's hash now (an upgrade
    retires old entries), and the transactions a crash left half-written (journal.pending).
    Journaled files whose package is gone go to `orphans` (path -> spec ids; _confined)."""
    warnings = [] if warnings is None else warnings
    orphaned: dict[str, list[str]] = {}
    raw = _read_journal(sdir)
    entries = _confined(journal.parse(raw, warnings, steps), warnings, orphaned)
    current: dict[str, str | None] = dict(extra_current)
    texts: dict[str, bytes] = {}
    dirs = confine.roots()
    for e in entries:
        p = e.get("path")
        if isinstance(p, str) and p not in current:
            try:
                texts[p] = _read_env(p, dirs)
                current[p] = fsops.sha256_bytes(texts[p])
            except fsops.TooBig as exc:
                warnings.append("%s is %s: not read" % (p, exc.strerror))
                current[p] = None
            except OSError:
                current[p] = None
    state = journal.fold(entries, current)
    installed = _installed(entries)
    for path, st in state.items():
        st["current"] = current.get(path)
        st["base_text"] = _backup_text(sdir, st["base"], st) if st["applied"] else None
        first = next(iter(st["applied"].values()), None)
        if first is not None:
            now = installed.get(str(first.get("package")))
            st["package_version"] = now[0] if now else None
            st["record_sha256"] = now[1].get(str(first.get("file"))) if now else None
        data = texts.get(path)
        if st["applied"] and data is not None and st["current"] not in known:
            try:
                st["current_text"] = data.decode("utf-8")
            except UnicodeDecodeError:
                pass
    half = [
        {"txn": t["txn"], "files": sorted(t["files"]), "done": t["done"]}
        for t in journal.pending(entries, current)
        if t["done"] and len(t["done"]) < len(t["files"])
    ]
    if orphaned and orphans is not None:
        orphans.update(orphaned)
    return state, half


def _installed(entries: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """package -> (installed version, RECORD) for every package the journal names."""
    from . import locate

    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for name in sorted({str(e["package"]) for e in entries if isinstance(e.get("package"), str)}):
        dist = locate.distribution(name)
        if dist is not None:
            out[name] = (dist.version, dict(dist.record or {}))
    return out


def _read_journal(sdir: str) -> bytes:
    """The journal's bytes (b"" without one), the state dir and backups/ checked (statedir)."""
    with statedir.open_state(sdir) or _NoState() as state:
        if state is None:
            return b""
        state.backups()  # a link or a stranger's dir is refused even when no backup is read
        return state.read_journal()


def _confined(
    entries: list[journal.Entry],
    warnings: list[str],
    orphaned: dict[str, list[str]] | None = None,
) -> list[journal.Entry]:
    """The entries whose path confine.why_not accepts (a missing file is fine: deleted since).

    A refused path whose directory is gone with its package (`pip uninstall`) goes into
    `orphaned` (path -> the spec ids applied to it) and its warning says how to clear it:
    `vpatch rollback` retires such entries (plan.plan_rollback). A path whose last entry
    already retired it is left out without a word: nothing counts there any more."""
    dirs = confine.roots()
    out, refused = [], {}
    for e in entries:
        p = e.get("path")
        if p is not None and p not in refused:
            why = confine.why_not(p, dirs, must_exist=False)
            if why:
                refused[p] = why
        if p is None or p not in refused:
            out.append(e)
    if refused:
        _refusals(entries, refused, warnings, orphaned)
    return out


def _refusals(
    entries: list[journal.Entry],
    refused: dict[str, str],
    warnings: list[str],
    orphaned: dict[str, list[str]] | None,
) -> None:
    """The warning per refused path (see _confined), and the orphans among them."""
    last: dict[str, journal.Entry] = {}
    for e in entries:
        if e.get("path") in refused:
            last[e["path"]] = e
    mine = [e for e in entries if "path" not in e or e["path"] in refused]  # and markers
    state = journal.fold(mine, {})
    for p, why in refused.items():
        if last[p].get("action") in (protocol.RESET, protocol.SUPERSEDE):
            continue
        specs = list(state.get(p, {}).get("applied") or {})
        package = next(
            (
                str(e["package"])
                for e in entries
                if e.get("path") == p and isinstance(e.get("package"), str)
            ),
            None,
        )
        if why == confine.MISSING and package and orphaned is not None and _uninstalled(package):
            orphaned[p] = specs
            warnings.append(
                "journal entry for %s ignored: its package %s is not installed any more "
                "(`vpatch rollback` retires it)" % (p, package)
            )
        else:
            warnings.append("journal entry for %s ignored: it %s" % (p, why))


def _uninstalled(package: str) -> bool:
    from . import locate

    return locate.distribution(package) is None


def _backup_text(sdir: str, sha: str | None, st: dict[str, Any]) -> str | None:
    """The backup's text, verified against its name; why not in st["base_error"] (absent when
    there is simply no such backup)."""
    if not sha:
        return None
    why = ""
    try:
        with statedir.open_state(sdir) or _NoState() as state:
            data = state.read_backup(sha) if state is not None else None
        if data is not None:
            return data.decode("utf-8")
    except ValueError as exc:  # corrupt (UnicodeDecodeError is one too)
        why = str(exc) if not isinstance(exc, UnicodeDecodeError) else "backup %s: not UTF-8" % sha
    except OSError as exc:
        why = "backup %s is unreadable (%s)" % (sha, exc.strerror)
    if why:
        st["base_error"] = why
    return None


def op_inspect(req: dict[str, Any]) -> dict[str, Any]:
    from . import locate

    packages: dict[str, Any] = {}
    current: dict[str, str | None] = {}
    known = set(req.get("known") or [])
    for name, files in (req.get("packages") or {}).items():
        dist = locate.distribution(name)
        if dist is None:
            packages[name] = {"version": None, "files": {}}
            continue
        infos = {rel: locate.file_info(dist, rel) for rel in files}
        for info in infos.values():
            if info["sha256"] in known and not info["error"]:
                info["text"], info["cached"] = None, True  # the controller has these bytes
        for info in infos.values():
            current[info["path"]] = info["sha256"]
        packages[name] = {"version": dist.version, "files": infos}
        source = locate.editable(dist)
        if source is not None:  # absent otherwise: the answer as it always was
            packages[name]["editable"] = source
    sdir = state_dir(req)
    warnings: list[str] = []
    orphans: dict[str, list[str]] = {}
    steps: list[journal.Entry] = []  # `vpatch rollout`'s step entries (journal.last_run)
    state, half = _journal_state(sdir, current, frozenset(known), warnings, orphans, steps)
    out = {
        "python": {
            "executable": sys.executable,
            "version": "%d.%d.%d" % sys.version_info[:3],
            "prefix": sys.prefix,
        },
        "host": _hostname(),
        "state_dir": sdir,
        "locked": _locked(sdir),
        "state": _state_facts(sdir),
        "packages": packages,
        "journal": state,
        "warnings": warnings,
        "incomplete": half,
    }
    if orphans:  # absent when none: the answer (and its fingerprint) as it always was
        out["orphaned"] = orphans
    if steps:  # absent when none; never in the fingerprint (no plan reads it)
        out["rollout"] = journal.last_run(steps)
    if "procs_for" in req:  # verify: who still runs code from before the patches were written
        ids = req["procs_for"]  # None (a bare status): every spec in the journal
        paths = [
            p
            for p, st in state.items()
            if st.get("applied") and (ids is None or set(ids) & set(st["applied"]))
        ]
        out["restart_required"] = op_procs({"paths": sorted(paths)})["restart_required"]
    return out


def _locked(sdir: str) -> bool:
    """Whether another vpatch holds the lock now. A read never needs the lock itself: the
    journal only grows by appends and is only replaced by a rename (compact.py), so what a
    read sees is one consistent snapshot. On a read-only state dir (a patched image mounted
    read-only) the lock file is opened read-only, which flock accepts; one that cannot be
    opened at all is not held by anyone who could write here either."""
    with statedir.open_state(sdir) or _NoState() as st:
        if st is None:
            return False

        def opener() -> int:
            try:
                return st.open_file(statedir.LOCK, os.O_RDWR)
            except OSError as exc:
                if exc.errno not in lock.READ_ONLY_ERRNOS:
                    raise
            return st.open_file(statedir.LOCK, os.O_RDONLY)

        try:
            return lock.held(st.sub(statedir.LOCK), opener)
        except OSError as exc:
            if exc.errno in lock.READ_ONLY_ERRNOS:
                return False
            raise


class _NoState:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        pass


def _state_facts(sdir: str) -> dict[str, Any]:
    """Can a commit keep its journal, lock and backups here? Asked BEFORE any write, so an
    unwritable or full state dir is refused while the host is still untouched."""
    p = _paths(sdir)
    where = p["backups"]
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    why = fsops.unwritable(where)
    for x in (p["journal"], p["lock"]):
        if not why and os.path.exists(x) and not os.access(x, os.R_OK | os.W_OK):
            why = "Permission denied (%s)" % x
    return {"dir": sdir, "writable": not why, "why": why, "free": fsops.free_bytes(where)}


def _ensure_state_dir(sdir: str) -> statedir.State:
    """The state dir and its backups/, opened and checked (statedir.py), created 0700 at every
    level we create whatever the umask."""
    state = statedir.open_state(sdir, create=True)
    assert state is not None
    try:
        state.backups(create=True)
    except BaseException:
        state.close()
        raise
    return state


def _adopt_state(state: statedir.State) -> None:
    """Give what vpatch keeps on the host the owner of the environment itself.

    An agent run through sudo on a user's venv must not leave a journal that user cannot read
    (0600, root) and a lock that user cannot open: owned like the env, the next run without
    sudo still works. Only what this run created, by descriptor (State.adopt)."""
    state.adopt()


def _backup(state: statedir.State, data: bytes, sha: str) -> None:
    state.write_backup(data, sha)


def _backup_bytes(state: statedir.State, sha: str) -> bytes:
    """A backup's bytes, verified against its name (statedir), or the commit is refused."""
    try:
        data = state.read_backup(sha)
    except ValueError as exc:
        raise _Refused(str(exc), protocol.BACKUP) from None
    if data is None:
        raise _Refused("backup %s is missing" % sha, protocol.BACKUP)
    return data


def _seed_backups(state: statedir.State, seeds: list[dict[str, Any]]) -> None:
    """apply --adopt: bytes the controller has (pip's, from the wheel) stored as backups, each
    checked against its sha256 first: the journal's base must be restorable exactly."""
    got = [(str(b.get("text", "")).encode("utf-8"), str(b.get("sha256"))) for b in seeds]
    for data, sha in got:
        if fsops.sha256_bytes(data) != sha:
            raise _Refused("backup seed %s does not have its sha256" % sha[:12], protocol.INPUT)
    for data, sha in got:
        _backup(state, data, sha)


def _new_bytes(state: statedir.State, w: dict[str, Any]) -> bytes | None:
    """The bytes a write leaves at its path (None: the file is removed)."""
    if w.get("delete"):
        return None
    if w.get("restore_sha256"):
        return _backup_bytes(state, str(w["restore_sha256"]))
    return str(w["text"]).encode("utf-8")


class _Refused(Exception):
    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def op_commit(req: dict[str, Any]) -> dict[str, Any]:
    """Write every file in `writes` or none: all hashes and syntax are checked before any write.

    Order (faults.POINTS names each step): lock; finish what a crashed commit left (`_repair`);
    check; stage new bytes in temp files next to the targets; back up the old bytes; journal
    (fsync'ed); rename (or unlink) each file; bytecode; commit marker. Everything that can fail
    for lack of space or permission (staging, backups) happens before the journal records
    anything, so such a failure leaves the host as it was; a crash after the journal is
    resolved by the next commit or `repair` from the files' actual bytes (journal.pending).

    Each target's directory is reached once, by a descriptor walk (confine.reach), and held
    until the end: its old bytes are read, the temp file made, the rename and the bytecode
    done in that very directory, so nothing is checked by name and then used by name."""
    from . import procs

    started = time.time()
    sdir = state_dir(req)
    state = _ensure_state_dir(sdir)
    p = _paths(state.path)
    writes = req.get("writes") or []
    notes: list[str] = []
    planned: list[Any] = []
    opener = lambda: state.open_file(statedir.LOCK, os.O_RDWR, create=True)  # noqa: E731
    try:
        with lock.Locked(p["lock"], float(req.get("lock_timeout", 60)), opener):
            faults.point("commit.locked")
            notes.extend(_repair(state))
            planned = _planned(state, writes)
            _seed_backups(state, req.get("backups") or [])
            held = {w[3].path: w[3] for w in planned}
            for d in sorted(held):
                notes.extend(_swept(fsops.sweep(held[d], started)))
            notes.extend(_swept(fsops.sweep(state.backups(), started, p["backups"])))
            txn, written_at = _write_planned(req, state, planned, notes)
            _collect(state, req.get("gc") or [], {w[0] for w in planned}, txn)
            notes.extend(_compact(state, req.get("journal") or [], bool(req.get("keep_backups"))))
            faults.point("commit.done")
    finally:
        for w in planned:
            w[3].close()
        _adopt_state(state)
        state.close()
    faults.point("commit.unlocked")
    restart = procs.scan(written_at) if planned else []
    return {
        "txn": txn,
        "written": [w[0] for w in planned],
        "notes": notes,
        "restart_required": restart,
    }


def _swept(stale: list[str]) -> list[str]:
    return ["removed %s (left by an interrupted run)" % x for x in stale]


def _reach(path: str, dirs: list[str], must_exist: bool, verb: str) -> tuple[fdwalk.Dir, str]:
    """confine.reach, its refusal an answer (kind `confined`) naming what was refused."""
    try:
        return confine.reach(path, dirs, must_exist)
    except fdwalk.Unsafe as exc:
        why = exc.why
    except FileNotFoundError:
        why = "does not exist"
    raise _Refused("refusing to %s %s: it %s" % (verb, path, why), confine.KIND_CONFINED)


def _read_at(where: fdwalk.Dir, name: str) -> tuple[bytes | None, os.stat_result | None]:
    """The bytes and stat of `name` in `where`, (None, None) when absent (fdwalk's checks)."""
    if where.lstat(name) is None:
        return None, None
    return where.read(name, fsops.MAX_FILE_BYTES)


def _read_env(path: str, dirs: list[str]) -> bytes:
    """A confined file's bytes, read through the walk (FileNotFoundError when absent)."""
    where, name = confine.reach(path, dirs, must_exist=True)
    with where:
        return where.read(name, fsops.MAX_FILE_BYTES)[0]


def _planned(state: statedir.State, writes: list[dict[str, Any]]) -> list[Any]:
    """(path, old, new, dir, name, stat) per write, after checking each path is confined to
    this environment's site-packages NOW (confine.reach: `dir` is its directory, held open for
    the commit), its hash, and that the new bytes compile. `old` None: the file must not exist
    yet (created); `new` None: the file is removed."""
    planned: list[Any] = []
    dirs = confine.roots()
    try:
        for w in writes:
            path = w["path"]
            expect = w.get("expect_sha256")
            where, name = _reach(path, dirs, expect is not None, "write")
            try:
                old, st = _read_at(where, name)
            except BaseException:
                where.close()
                raise
            planned.append((path, old, None, where, name, st))
            if (fsops.sha256_bytes(old) if old is not None else None) != expect:
                raise _Refused("%s changed since inspection" % path, protocol.CONFLICT)
            new = _new_bytes(state, w)
            err = fsops.compile_check(new, path) if new is not None else None
            if err:
                raise _Refused(
                    "%s: new content does not compile here: %s" % (path, err), protocol.SYNTAX
                )
            planned[-1] = (path, old, new, where, name, st)
    except BaseException:
        for item in planned:
            item[3].close()
        raise
    return planned


def _write_planned(
    req: dict[str, Any], state: statedir.State, planned: list[Any], notes: list[str]
) -> tuple[str, float]:
    """Stage, back up, journal, rename, marker: the commit proper (the lock is held)."""
    staged: dict[str, fsops.Staged] = {}
    try:
        for path, _old, new, where, name, st in planned:
            if new is not None:
                staged[path] = fsops.stage(where, name, new, st)
        for _path, old, *_rest in planned:
            if old is not None:
                _backup(state, old, fsops.sha256_bytes(old))
        txn = req.get("txn") or "%x-%d" % (int(time.time() * 1e6), os.getpid())
        meta = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "txn": txn,
            "user": _user(),
            "host": _hostname(),
        }
        entries = [dict(e, **meta) for e in req.get("journal") or []]
        _append(state, entries)
        from . import procs

        written_at = procs.now()  # processes started before this run the old bytes
        for path, _old, new, where, name, _st in planned:
            if new is None:
                _remove(where, name, path)
                continue
            item = staged[path]
            item.publish()
            note = fsops.refresh_bytecode(where, item)
            faults.point("commit.bytecode")
            if note:
                notes.append(note)
    finally:
        for item in staged.values():
            item.discard()  # no-op once published; removes the temp file after an error
    try:
        _append(state, [protocol.marker(txn)], point="marker.appended")
    except OSError as exc:
        raise _Refused(_put_back(planned, exc), protocol.OS_ERROR) from None
    return txn, written_at


def _remove(where: fdwalk.Dir, name: str, path: str) -> None:
    """Unlink a file vpatch created (`name` in the held `where`), with its bytecode; a
    rename's fault points mark the step. A link there is removed, never followed."""
    faults.point("write.before_rename")
    where.unlink(name)
    faults.point("write.renamed")
    where.fsync()
    faults.point("write.dir_synced")
    fsops.drop_bytecode(where, path)


def _put_at(where: fdwalk.Dir, name: str, path: str, data: bytes | None, tag: str) -> None:
    """`name` in `where` back to `data` (None: absent), by rename, with its bytecode. The
    mode/owner are those of the file there when it is one vpatch may replace (fdwalk's
    check), else a new module's."""
    if data is None:
        _remove(where, name, path)
        return
    st = where.lstat(name)
    try:
        if st is not None:
            where.check(st, name)
    except fdwalk.Unsafe:
        st = None
    item = fsops.stage(where, name, data, st)
    try:
        item.publish(tag)
    finally:
        item.discard()
    fsops.refresh_bytecode(where, item)


def _put_file(path: str, data: bytes | None, tag: str = "putback") -> None:
    """`path` back to `data`, its directory reached afresh NOW (confine.reach): whatever was
    checked before, a component swapped for a link since is refused here, not written through."""
    where, name = _reach(path, confine.roots(), False, "put back")
    with where:
        _put_at(where, name, path, data, tag)


def op_repair(req: dict[str, Any]) -> dict[str, Any]:
    """Under the lock: settle every transaction a crash left without its marker."""
    sdir = state_dir(req)
    state = statedir.open_state(sdir)
    if state is None:
        return {"notes": []}
    opener = lambda: state.open_file(statedir.LOCK, os.O_RDWR, create=True)  # noqa: E731
    try:
        with lock.Locked(state.sub(statedir.LOCK), float(req.get("lock_timeout", 60)), opener):
            notes = _repair(state)
    finally:
        _adopt_state(state)
        state.close()
    return {"notes": notes}


def _repair(state: statedir.State) -> list[str]:
    """Give each unmarked transaction its marker: `commit` when every file it names has its
    after-hash, `abort` otherwise, after putting the files it did change back to their
    before-bytes (from the backups the crashed commit made before its journal entries).

    Runs under the lock, so a live commit (which holds it) is never mistaken for a dead one."""
    entries = _confined(journal.parse(state.read_journal()), [])
    # Only the files of unmarked transactions are hashed: every commit runs this under its lock.
    current = {name: _sha_or_none(name) for name in journal.unmarked_paths(entries)}
    notes: list[str] = []
    todo = journal.pending(entries, current)
    if any(t["done"] and len(t["done"]) < len(t["files"]) for t in todo):
        faults.point("repair.checked")  # checked and hashed; the writes walk again (_put_file)
    for t in todo:
        files, done = t["files"], t["done"]
        if len(done) == len(files):
            _append(state, [protocol.marker(t["txn"])], point="marker.appended")
            notes.append("transaction %s had written every file; marked committed" % t["txn"])
            continue
        for name in done:
            before = files[name][0]
            _put_file(name, None if before is None else _backup_bytes(state, before), "repair")
        _append(state, [protocol.marker(t["txn"], abort=True)], point="marker.appended")
        if done:
            notes.append(
                "transaction %s was cut after %d of %d files; restored %s"
                % (t["txn"], len(done), len(files), ", ".join(done))
            )
    return notes


def _sha_or_none(path: str) -> str | None:
    """The sha256 of a confined file, read through the walk; None when absent or refused."""
    try:
        return fsops.sha256_bytes(_read_env(path, confine.roots()))
    except OSError:
        return None


def _collect(state: statedir.State, shas: list[Any], written: set[str], txn: str) -> None:
    """Remove backups the controller says no entry needs (another release's pristine bytes,
    retired by this commit), unless the journal, folded now, still names one as a base or
    this commit's own entries start from it (a failed verify puts those bytes back)."""
    if not shas:
        return
    entries = journal.parse(state.read_journal())
    paths = {str(e["path"]) for e in entries if "path" in e} | written
    live = {
        st["base"]
        for st in journal.fold(entries, {p: _sha_or_none(p) for p in paths}).values()
        if st["applied"]
    }
    live |= {e.get("before") for e in entries if e.get("txn") == txn}
    fd = state.backups()
    for sha in shas:
        name = str(sha)
        if name in live or len(name) != 64 or not all(c in "0123456789abcdef" for c in name):
            continue
        try:
            if stat.S_ISREG(os.lstat(name, dir_fd=fd).st_mode):
                os.unlink(name, dir_fd=fd)
        except OSError:
            continue


def _compact(state: statedir.State, entries: list[journal.Entry], keep: bool) -> list[str]:
    """The journal kept proportional to the state, retired backups removed (compact.py);
    `keep`: the controller may still put this commit's previous bytes back (a rollback whose
    remaining specs' checks run next), so the backups its own entries name stay."""
    from . import compact

    return compact.after_commit(state, compact.retires(entries), entries if keep else ())


def _append(state: statedir.State, entries: list[journal.Entry], **kw: Any) -> None:
    fd = state.open_file(statedir.JOURNAL, os.O_RDWR | os.O_APPEND, create=True)
    try:
        journal.append(fd, entries, **kw)
    finally:
        os.close(fd)


def _put_back(planned: list[Any], exc: OSError) -> str:
    """The commit marker could not be written (disk full...) after the renames: put every file
    back to its old bytes, so no patched file is left whose record is an unfinished txn; what
    that says, for the error answer."""
    failed = []
    for path, old, new, where, name, _st in planned:
        try:
            if _sha_or_none(path) == (fsops.sha256_bytes(new) if new is not None else None):
                _put_at(where, name, path, old, "putback")
        except OSError as exc2:
            failed.append("%s (%s)" % (path, exc2.strerror or exc2))
    why = "cannot write the journal's commit marker: %s" % (exc.strerror or exc)
    if failed:
        return why + "; could NOT put back " + ", ".join(failed) + ": run `vpatch status`"
    return why + "; every file was put back as it was"


def _user() -> str:
    """getpass.getuser() (the login name from the environment, else the password database),
    without importing getpass (termios and more: ~1 ms)."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        user = os.environ.get(name)
        if user:
            return user
    try:
        import pwd

        return pwd.getpwuid(os.getuid())[0]
    except Exception:
        return str(os.getuid())


def _hostname() -> str:
    return os.uname().nodename  # = socket.gethostname(), without importing socket


def op_verify(req: dict[str, Any]) -> dict[str, Any]:
    from . import probe

    return {"checks": probe.run(req.get("checks") or [])}


def op_procs(req: dict[str, Any]) -> dict[str, Any]:
    """Processes of this environment that started before the newest of `paths` was written."""
    from . import procs

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
    from . import fetch

    try:
        return fetch.fetch(
            str(req.get("url", "")),
            float(req.get("timeout", 10)),
            int(req.get("max_bytes", fetch.DEFAULT_MAX_BYTES)),
        )
    except fetch.BadURL as exc:
        raise _Refused(str(exc), protocol.INPUT) from None


def op_restart(req: dict[str, Any]) -> dict[str, Any]:
    from . import restart  # `vpatch rollout`: restart the server, wait for health (restart.py)

    try:
        return restart.OPS[str(req.get("op"))](req)
    except ValueError as exc:  # fetch.BadURL too
        raise _Refused(str(exc), protocol.INPUT) from None


def op_scan(req: dict[str, Any]) -> dict[str, Any]:
    from . import locate, scan  # `vpatch diff`: files of a dist that differ from its RECORD

    out = scan.scan(req, state_dir(req))
    dist = locate.distribution(str(req.get("package") or "")) if out.get("version") else None
    source = locate.editable(dist) if dist is not None else None
    if source is not None:  # its code is not RECORD's files: "every file is pip's" would lie
        out["editable"] = source
    return out


OPS = {
    "inspect": op_inspect,
    "scan": op_scan,
    "commit": op_commit,
    "repair": op_repair,
    "verify": op_verify,
    "procs": op_procs,
    "fetch": op_fetch,
    protocol.RESTART: op_restart,
    protocol.HEALTH: op_restart,
    protocol.STEP: op_restart,
}


def handle(req: dict[str, Any]) -> dict[str, Any]:
    _fresh_request(req)
    op = OPS.get(req.get("op", ""))
    if op is None:
        return protocol.error(protocol.PROTOCOL_ERROR, "unknown op %r" % req.get("op"))
    try:
        out = op(req)
    except (_Refused, statedir.StateError) as exc:
        return protocol.error(exc.kind, str(exc))
    except TimeoutError as exc:
        return protocol.error(protocol.LOCKED, str(exc))
    except OSError as exc:
        where = " (%s)" % exc.filename if exc.filename else ""
        return protocol.error(protocol.OS_ERROR, "%s%s" % (exc.strerror or exc, where))
    out["ok"] = True
    out["protocol"] = PROTOCOL
    if "then_if" in req or "then" in req:
        from . import chain  # requests that ride in the same exchange (agent/chain.py)

        chain.run(req, out, handle)
    return out


def _fresh_request(req: dict[str, Any]) -> None:
    """Forget what an earlier request of this session set: its fault point, the code objects
    compile_check kept for the .pyc, and what importlib.metadata cached about sys.path (3.10+
    caches directory listings by mtime)."""
    faults.arm(str(req.get("fault") or faults.ENV_SPEC))
    del faults.REACHED[:]
    fsops._COMPILED.clear()
    meta = sys.modules.get("importlib.metadata")  # never imported just for this
    finder = getattr(meta, "MetadataPathFinder", None)
    clear = getattr(finder, "invalidate_caches", None)
    if clear is not None and getattr(clear, "__self__", None) is finder:  # a classmethod: 3.10+
        clear()


def answer(line: str) -> dict[str, Any]:
    """The answer to one request line (a bad line is answered, never fatal)."""
    try:
        req = wire.loads(line)
    except ValueError as exc:
        res: dict[str, Any] = protocol.error(protocol.PROTOCOL_ERROR, "bad request: %s" % exc)
    else:
        if _REFUSED:
            from . import privsep

            res = protocol.error(privsep.KIND, _REFUSED)
        elif isinstance(req, dict):
            res = handle(req)
        else:
            res = protocol.error(protocol.PROTOCOL_ERROR, "bad request: not a JSON object")
    res["pid"] = os.getpid()
    res["uid"] = os.geteuid()  # who did the work (privsep: the env's owner, dropped from root)
    if _DROPPED_FROM is not None:
        res["dropped_from"] = _DROPPED_FROM
    return res


_DROPPED_FROM: int | None = None  # root's uid when this worker dropped from it (privsep)
_REFUSED = ""  # why the worker does not go on (privsep); every request gets it


def _done() -> None:
    """EOF: the session is over. Run by BOOT (module name `vpatch_agent`), the process ends
    here without the interpreter's finalization (freeing every module and object: ~3 ms of
    host CPU per agent): every op has closed its files and reaped its processes before
    answering, and the answers are flushed. Imported in-process (`patcher.agent`), it returns."""
    if __name__ == "vpatch_agent":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _settle() -> None:
    global _DROPPED_FROM, _REFUSED
    from . import privsep

    privsep.worker(sys.argv[1:])
    _DROPPED_FROM = privsep.STATE.get("dropped_from")
    _REFUSED = privsep.STATE.get("refused") or ""


def main() -> None:
    """Answer each request line on stdin with one JSON line on stdout, until EOF.

    The last request may lack its newline (one-shot callers send the bundle line, a request,
    EOF).
    Blank lines are ignored. If the caller is gone (stdout broken), the agent just exits: the
    request it was answering is complete on disk either way.

    Started by privsep's stage 0 (argv `privsep`), it first settles who it works as."""
    if sys.argv[1:2] == ["privsep"]:
        _settle()
    while True:
        line = sys.stdin.readline()
        if not line:
            _done()
            return
        if not line.strip():
            continue
        res = answer(line)
        try:
            sys.stdout.write(wire.dumps(res) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            # Python would complain again at exit while flushing stdout: point it at /dev/null.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(1)
