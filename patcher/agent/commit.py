"""`commit` and `repair`: every write vpatch makes on a host (stdlib only, Python 3.9+).

A commit writes every file of one transaction or none: under the environment's lock it
settles what a crashed commit left (`repair`), re-checks each file's sha256 and compiles the
new bytes, stages them in temp files next to their targets, backs up the old bytes, journals
(fsync'ed), renames, refreshes the bytecode and appends the commit marker; faults.POINTS
names every step, and docs/design.md ("Why writes are atomic", "Transactions") says why each
comes where it does. Each target's directory is reached once, by a descriptor walk
(confine.reach), and held until the end: nothing is checked by name and then used by name.
"""

from __future__ import annotations

import os
import stat
import time

from . import confine, facts, faults, fdwalk, fsops, journal, lock, protocol, statedir
from .protocol import Refused

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .protocol import BackupSeed, CommitAnswer, Write


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


def _leased(state: statedir.State) -> bool:
    """Whether the state dir has an entry by the rollout lease's name at all (what it is, and
    whether it holds these specs, is lease.check_commit's to say). Asked under the lock every
    lease change takes, so the answer holds for the whole commit; where there is none, as on
    every host no `vpatch rollout` is walking, lease.py and leasing.py are not loaded (~0.3 ms
    of host CPU per commit)."""
    try:
        os.stat(protocol.LEASE_FILE, dir_fd=state.fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # (lease.check_commit meets it too, and says what it is)
    return True


def _backup(state: statedir.State, data: bytes, sha: str) -> None:
    """Store the backup; backups/ is fsync'ed once for the transaction (_write_planned)."""
    state.write_backup(data, sha, sync=False)


def _backup_bytes(state: statedir.State, sha: str) -> bytes:
    """A backup's bytes, verified against its name (statedir), or the commit is refused."""
    try:
        data = state.read_backup(sha)
    except ValueError as exc:
        raise Refused(str(exc), protocol.BACKUP) from None
    if data is None:
        raise Refused("backup %s is missing" % sha, protocol.BACKUP)
    return data


def _seed_backups(state: statedir.State, seeds: list[BackupSeed]) -> None:
    """apply --adopt: bytes the controller has (pip's, from the wheel) stored as backups, each
    checked against its sha256 first: the journal's base must be restorable exactly."""
    got = [(str(b.get("text", "")).encode("utf-8"), str(b.get("sha256"))) for b in seeds]
    for data, sha in got:
        if fsops.sha256_bytes(data) != sha:
            raise Refused("backup seed %s does not have its sha256" % sha[:12], protocol.INPUT)
    for data, sha in got:
        _backup(state, data, sha)


def _new_bytes(state: statedir.State, w: Write) -> bytes | None:
    """The bytes a write leaves at its path (None: the file is removed)."""
    if w.get("delete"):
        return None
    if w.get("restore_sha256"):
        return _backup_bytes(state, str(w["restore_sha256"]))
    return str(w["text"]).encode("utf-8")


def op_commit(req: dict[str, Any]) -> CommitAnswer:
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
    started = time.time()
    sdir = facts.state_dir(req)
    state = _ensure_state_dir(sdir)
    p = facts.paths(state.path)
    writes = req.get("writes") or []
    notes: list[str] = []
    planned: list[Any] = []
    opener = lambda: state.open_file(statedir.LOCK, os.O_RDWR, create=True)  # noqa: E731
    try:
        with lock.Locked(p["lock"], float(req.get("lock_timeout", 60)), opener):
            faults.point("commit.locked")
            if _leased(state):
                from . import lease  # a live rollout of these specs: refused (agent/lease.py)

                lease.check_commit(state, req)
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
    restart: list[dict[str, Any]] = []
    if written_at >= 0:
        from . import rootscan

        changed = [(w[0], written_at) for w in planned if _loaded(w[0], w[1] is not None)]
        restart = rootscan.processes(written_at, changed)
    return {
        "txn": txn,
        "written": [w[0] for w in planned],
        "notes": notes,
        "restart_required": restart,
    }


# What a running process may have loaded from site-packages: modules (source, bytecode,
# extensions) and the .pth files `site` runs at start. Other files (data, metadata) are read,
# not run: a process that read one runs no old code because it changed.
LOADED_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd", ".pth")


def scan_wanted(changes: list[tuple[str, bool]]) -> bool:
    """Whether a commit's writes call for the restart scan (/proc, procs.scan): True when a
    file a process may have imported changed, i.e. one that existed before the write (`True`
    in (path, existed)) and is code a process loads (LOADED_SUFFIXES). A module the commit
    creates cannot have been imported by any process running now, so a commit that only
    creates modules, or only rewrites data, leaves every process as current as it was."""
    return any(_loaded(path, existed) for path, existed in changes)


def _loaded(path: str, existed: bool) -> bool:
    """Could a process running now have loaded `path` (scan_wanted)?"""
    return existed and path.endswith(LOADED_SUFFIXES)


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
    raise Refused("refusing to %s %s: it %s" % (verb, path, why), confine.KIND_CONFINED)


def _read_at(where: fdwalk.Dir, name: str) -> tuple[bytes | None, os.stat_result | None]:
    """The bytes and stat of `name` in `where`, (None, None) when absent (fdwalk's checks)."""
    if where.lstat(name) is None:
        return None, None
    return where.read(name, fsops.MAX_FILE_BYTES)


def _planned(state: statedir.State, writes: list[Write]) -> list[Any]:
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
                raise Refused("%s changed since inspection" % path, protocol.CONFLICT)
            new = _new_bytes(state, w)
            err = fsops.compile_check(new, path) if new is not None else None
            if err:
                raise Refused(
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
        state.sync_backups()  # one directory fsync for them all, before the journal names them
        txn = req.get("txn") or "%x-%d" % (int(time.time() * 1e6), os.getpid())
        meta = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "txn": txn,
            "user": _user(),
            "host": facts.hostname(),
        }
        entries = [dict(e, **meta) for e in req.get("journal") or []]
        _append(state, entries)
        written_at = -1.0  # no scan: no process can have imported what this commit changes
        if scan_wanted([(w[0], w[1] is not None) for w in planned]):
            from . import procs

            written_at = procs.now()  # processes started before this run the old bytes
        for path, _old, new, where, name, _st in planned:
            if new is None:
                _unlink(where, name)
            else:
                staged[path].publish(sync=False)
        _sync_dirs([w[3] for w in planned])
        for path, _old, new, where, _name, _st in planned:
            if new is None:
                fsops.drop_bytecode(where, path)
                continue
            note = fsops.refresh_bytecode(where, staged[path])
            faults.point("commit.bytecode")
            if note:
                notes.append(note)
    finally:
        for item in staged.values():
            item.discard()  # no-op once published; removes the temp file after an error
    try:
        _append(state, [protocol.marker(txn)], point="marker.appended")
    except OSError as exc:
        raise Refused(_put_back(planned, exc), protocol.OS_ERROR) from None
    return txn, written_at


def _unlink(where: fdwalk.Dir, name: str) -> None:
    """Unlink a file vpatch created (`name` in the held `where`), a rename's fault points
    marking the step; the directory is fsync'ed by the caller (_sync_dirs). A link there is
    removed, never followed."""
    faults.point("write.before_rename")
    where.unlink(name)
    faults.point("write.renamed")


def _sync_dirs(dirs: list[fdwalk.Dir]) -> None:
    """fsync each directory of a transaction's renames once, however many of its files it
    holds: after every rename, before the commit marker (a marker must never be durable
    while a rename it covers is not; a crash before this leaves an unmarked transaction,
    which repair settles from the files' bytes)."""
    done = set()
    for where in dirs:
        key = (where.st.st_dev, where.st.st_ino)
        if key not in done:
            done.add(key)
            where.fsync()
    if done:
        faults.point("write.dir_synced")


def _remove(where: fdwalk.Dir, name: str, path: str) -> None:
    """_unlink, made durable at once, and the file's bytecode dropped (a put-back)."""
    _unlink(where, name)
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
    sdir = facts.state_dir(req)
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
    entries = facts.confined(journal.parse(state.read_journal()), [])
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
        return fsops.sha256_bytes(facts.read_env(path, confine.roots()))
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
