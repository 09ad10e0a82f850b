"""`inspect` and `procs`: what the host has, read and never written (stdlib only, 3.9+).

An inspect answer is every fact the controller plans from: the interpreter, each asked
package's version and target files (bytes, sha256, RECORD's hash), the journal folded per
file with its backups' texts, the transactions a crash left half-written, whether another run
holds the lock and whether the state dir could take a commit. Nothing here takes the lock or
creates a file: the journal only grows by appends or is replaced by a rename (compact.py),
so what a read sees is one consistent snapshot, and a read-only environment answers as any
other. Every path in the environment is read through a descriptor walk (confine.reach,
fdwalk.py), never by a name checked earlier. commit.py reuses the readers below under its lock.
"""

from __future__ import annotations

import os
import sys

from . import confine, fsops, journal, lock, protocol, statedir

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def state_dir(req: dict[str, Any]) -> str:
    return req.get("state_dir") or os.path.join(sys.prefix, ".vpatch")


def _own_mount(path: str) -> bool | None:
    """Whether `path` is on another file system than `/` (in a container: a volume, which a
    re-created container may mount again, not the writable layer it loses); None: unknown."""
    try:
        return os.stat(path).st_dev != os.stat("/").st_dev
    except OSError:
        return None


def paths(sdir: str) -> dict[str, str]:
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
    located: dict[str, Any] | None = None,
    unverified: list[Any] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Per journaled file: what vpatch applied, the hashes, the pristine text (backup) and,
    for files not among the inspected packages' (whose text travels there), the current text
    unless the controller already holds it (`known`): rollback's diff needs it, and without it
    the controller would rebuild it by re-running every edit (importing libcst for a diff).

    Ill-formed lines and entries whose path is not a regular file in this environment's
    site-packages are left out, each with a line in `warnings` (see journal.parse, confine).

    Also per file the installed version of its package and RECORD's hash now (an upgrade
    retires old entries), and the transactions a crash left half-written (journal.pending).
    Journaled files whose package is gone go to `orphans` (path -> spec ids; confined).
    `located`: the distributions this request already located (package -> Dist or None), not
    located again (an inspect's answer describes one moment of each package)."""
    warnings = [] if warnings is None else warnings
    orphaned: dict[str, list[str]] = {}
    raw = _read_journal(sdir)
    verified: list[journal.Entry] = []
    entries = confined(journal.parse(raw, warnings, steps, verified), warnings, orphaned)
    current: dict[str, str | None] = dict(extra_current)
    texts: dict[str, bytes] = {}
    dirs = confine.roots()
    for e in entries:
        p = e.get("path")
        if isinstance(p, str) and p not in current:
            try:
                texts[p] = read_env(p, dirs)
                current[p] = fsops.sha256_bytes(texts[p])
            except fsops.TooBig as exc:
                warnings.append("%s is %s: not read" % (p, exc.strerror))
                current[p] = None
            except OSError:
                current[p] = None
    state = journal.fold(entries, current)
    if unverified is not None:
        unverified.extend(journal.unverified(entries, verified, state))
    installed = _installed(entries, located or {})
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


def _installed(
    entries: list[dict[str, Any]], located: dict[str, Any]
) -> dict[str, tuple[str, dict[str, Any]]]:
    """package -> (installed version, RECORD) for every package the journal names."""
    from . import locate

    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for name in sorted({str(e["package"]) for e in entries if isinstance(e.get("package"), str)}):
        dist = located[name] if name in located else locate.distribution(name)
        if dist is not None:
            out[name] = (dist.version, dict(dist.record or {}))
    return out


def _read_journal(sdir: str) -> bytes:
    """The journal's bytes (b"" without one), the state dir and backups/ checked (statedir)."""
    with statedir.open_state(sdir) or NoState() as state:
        if state is None:
            return b""
        state.backups()  # a link or a stranger's dir is refused even when no backup is read
        return state.read_journal()


def confined(
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
    """The warning per refused path (see confined), and the orphans among them."""
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
        with statedir.open_state(sdir) or NoState() as state:
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
    located: dict[str, Any] = {}
    for name, files in (req.get("packages") or {}).items():
        dist = located[name] = locate.distribution(name)
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
    unchecked: list[Any] = []  # [spec, txn]: written, checks never finished (protocol.VERIFIED)
    state, half = _journal_state(
        sdir, current, frozenset(known), warnings, orphans, steps, located, unchecked
    )
    out = {
        "python": {
            "executable": sys.executable,
            "version": "%d.%d.%d" % sys.version_info[:3],
            "prefix": sys.prefix,
            "own_mount": _own_mount(sys.prefix),
        },
        "host": hostname(),
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
    if unchecked:  # absent when none; never in the fingerprint
        out["unverified"] = unchecked
    out.update(_seen_now(req, state))  # --resume: the host now, as a step entry's `seen`
    if req.get("baked"):  # bare status: wheels `vpatch wheel` built (baked.py); absent if none
        from . import baked

        found = baked.find(warnings)
        if found:
            out["baked"] = found
    if "procs_for" in req:  # verify: who still runs code from before the patches were written
        ids = req["procs_for"]  # None (a bare status): every spec in the journal
        paths = [
            p
            for p, st in state.items()
            if st.get("applied") and (ids is None or set(ids) & set(st["applied"]))
        ]
        out["restart_required"] = op_procs({"paths": sorted(paths)})["restart_required"]
    return out


def _seen_now(req: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """{"seen": ...} for an inspect asked `seen_for` (agent/seen.py), else nothing."""
    ids = req.get("seen_for")
    if not isinstance(ids, list):
        return {}
    from . import seen

    return {"seen": seen.snapshot(state, [str(x) for x in ids], seen.server_now())}


def _locked(sdir: str) -> bool:
    """Whether another vpatch holds the lock now. A read never needs the lock itself: the
    journal only grows by appends and is only replaced by a rename (compact.py), so what a
    read sees is one consistent snapshot. On a read-only state dir (a patched image mounted
    read-only) the lock file is opened read-only, which flock accepts; one that cannot be
    opened at all is not held by anyone who could write here either."""
    with statedir.open_state(sdir) or NoState() as st:
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


class NoState:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        pass


def _state_facts(sdir: str) -> dict[str, Any]:
    """Can a commit keep its journal, lock and backups here? Asked BEFORE any write, so an
    unwritable or full state dir is refused while the host is still untouched."""
    p = paths(sdir)
    where = p["backups"]
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    why = fsops.unwritable(where)
    for x in (p["journal"], p["lock"]):
        if not why and os.path.exists(x) and not os.access(x, os.R_OK | os.W_OK):
            why = "Permission denied (%s)" % x
    return {"dir": sdir, "writable": not why, "why": why, "free": fsops.free_bytes(where)}


def read_env(path: str, dirs: list[str]) -> bytes:
    """A confined file's bytes, read through the walk (FileNotFoundError when absent)."""
    where, name = confine.reach(path, dirs, must_exist=True)
    with where:
        return where.read(name, fsops.MAX_FILE_BYTES)[0]


def hostname() -> str:
    return os.uname().nodename  # = socket.gethostname(), without importing socket


def op_procs(req: dict[str, Any]) -> dict[str, Any]:
    """Processes of this environment that hold one of `paths` as it was before it was last
    written (its mtime): holders.decide's rule, per package."""
    from . import procs

    written = []
    for path in req.get("paths") or []:
        try:
            written.append((os.path.realpath(path), procs.from_wall(os.stat(path).st_mtime)))
        except OSError:
            continue
    if not written:
        return {"restart_required": []}
    from . import rootscan

    return {"restart_required": rootscan.processes(max(w[1] for w in written), written)}
