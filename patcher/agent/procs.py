"""Reads what /proc says of the processes that may still run code from before a write
("restart required"); patcher/agent/holders.py decides from it which ones hold the changed
code now.

A Python process reads a module's source once, at import; replacing the file later changes
nothing in it. So after vpatch writes (apply or rollback), a process of the patched
environment that started BEFORE the write and had the changed package loaded still runs the
old code and needs a restart.

Linux only (/proc); elsewhere the scan finds nothing. What is read, per process (threads are
not listed in /proc, so each pid is a process):

1. `/proc/PID/exe`, compared (device and inode) with this environment's interpreter: the one
   cheap check that rules out every process that is not that Python (a shell, supervisord
   or systemd of another interpreter), which are never read further. A venv's `bin/python`
   is a symlink to its base interpreter, so this alone cannot tell two venvs of one base
   apart.
2. Its parent, start time (/proc/PID/stat field 22: clock ticks since boot, 10 ms resolution,
   compared with the write time on the same boot clock, so a wall-clock jump cannot confuse
   it) and argv. holders.wanted then says whether the rest is worth reading.
3. Whether its argv[0], resolved the way Python itself resolves it to find `pyvenv.cfg`
   (relative: against /proc/PID/cwd; a bare name: along the PATH in /proc/PID/environ), lies
   in the environment's bin directory (`ENV/bin/python -m ...`, `python ...` with the venv on
   PATH, console scripts: the kernel runs the shebang interpreter, so argv[0] is
   `ENV/bin/python`), and the files it maps under the environment's site-packages
   (/proc/PID/maps: extension modules; that covers processes that rewrote their argv,
   setproctitle, vLLM's `VLLM::EngineCore`).
4. With changed packages to look for: its cwd and open files under site-packages, and the
   text of the program file its argv runs (a console script names its entry point's module).

Paths in /proc/PID (argv[0], cwd, PATH, maps, fds) are the PROCESS's view. A process in
another mount namespace (a container sharing the host's PID namespace, `docker --pid=host`,
hostPID pods) may show the very same path string for a different environment, so for those
the directories are compared by identity (device and inode) through /proc/PID/root, never by
name, and only paths under a site dir that is our very directory are kept.

The agent itself and its ancestors (the shell or sshd that started it, the vpatch CLI) are
never read; other vpatch agents and what they started (probes) are left out by holders: an
agent session lives for a whole run, so a concurrent run's agent on this env would otherwise
look like a stale server. Without root, other users' processes cannot be inspected and are
not listed.
"""

from __future__ import annotations

import os
import site
import stat
import sys
import time

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_FDS = 4096  # open files looked at per process (holders: a module file open under a package)


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name (which may contain spaces and ')')."""
    raw = _read("/proc/%d/stat" % pid).decode("ascii", "replace")
    return raw[raw.rindex(")") + 2 :].split()


def _ppid(pid: int) -> int:
    return int(_stat_fields(pid)[1])  # field 4


def _ancestors(pid: int) -> set[int]:
    out = {pid}
    while pid > 1:
        try:
            pid = _ppid(pid)
        except (OSError, ValueError, IndexError):
            break
        out.add(pid)
    return out


def _argv(pid: int) -> list[str]:
    raw = _read("/proc/%d/cmdline" % pid)
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _environ_path(pid: int) -> str:
    try:
        raw = _read("/proc/%d/environ" % pid)
    except OSError:
        return ""
    for item in raw.split(b"\0"):
        if item.startswith(b"PATH="):
            return item[5:].decode("utf-8", "replace")
    return ""


def _mnt_ns(pid: str) -> str:
    try:
        return os.readlink("/proc/%s/ns/mnt" % pid)
    except OSError:
        return ""


def _view(pid: int, own_ns: str) -> str:
    """Prefix that shows paths as process `pid` sees them: "" in our own mount namespace (or
    when that cannot be told), else its root, /proc/PID/root."""
    ns = _mnt_ns(str(pid))
    return "" if not ns or ns == own_ns else "/proc/%d/root" % pid


def _same_file(theirs: str, ours: str) -> bool:
    """Is `theirs` (a path with a _view prefix, or a /proc link) the very file `ours` (device
    and inode)? Used on directories too, where identity is what tells envs apart: a hard-linked
    copy of an env (cp -al) shares every file's inode but has directories of its own."""
    try:
        a, b = os.stat(theirs), os.stat(ours)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _resolve_argv0(pid: int, argv0: str, view: str = "") -> str | None:
    """argv[0] as the process itself would have resolved it to locate its environment (a path
    in the process's own view)."""
    if "/" in argv0:
        if os.path.isabs(argv0):
            return argv0
        try:
            return os.path.join(os.readlink("/proc/%d/cwd" % pid), argv0)
        except OSError:
            return None
    for d in _environ_path(pid).split(os.pathsep):
        cand = os.path.join(d or ".", argv0)
        if os.path.isfile(view + cand) and os.access(view + cand, os.X_OK):
            return cand
    return None


def _in_bin_dir(pid: int, argv: list[str], bin_dir: str, view: str = "") -> bool:
    if not argv:
        return False
    path = _resolve_argv0(pid, argv[0], view)
    if path is None:
        return False
    # Compare directories, not files: ENV/bin/python resolves (as a file) to the base binary.
    if not view:
        return os.path.realpath(os.path.dirname(path)) == bin_dir
    return _same_file(view + os.path.dirname(path), bin_dir)


def _maps_site(pid: int, sites: list[str], view: str = "") -> bool:
    """Does the process map a file under one of `sites` (/proc/PID/maps)?"""
    return bool(_mapped(pid, sites, view, first=True))


def _seen_sites(sites: list[str], view: str) -> list[str]:
    """The `sites` that are, in the view `view` (a _view prefix), our very directories: in
    another mount namespace only a path under one of those names our files."""
    return [s for s in sites if _same_file(view + s, s)] if view else sites


def _mapped(pid: int, sites: list[str], view: str = "", first: bool = False) -> list[str]:
    """The files the process maps under one of `sites` (/proc/PID/maps), each once; with
    `first`, only the first found. The bytes are searched for " SITE" (a path column
    follows the padding; the other columns hold no "/"), and only a line with a hit is split
    to check it: a torch process maps thousands of files, and splitting every line cost
    most of the scan's CPU.

    In another mount namespace a hit counts only where the process's own SITE is our very
    directory, so that is asked first (one stat per site): where it is none of them, the
    maps cannot hold a hit and are not read. The kernel writes a maps line per mapping with
    its path resolved (~0.1 ms per 100 lines), and a host's other containers and envs of
    the same interpreter are exactly the processes that get this far."""
    sites = _seen_sites(sites, view)
    if not sites:
        return []
    try:
        raw = _read("/proc/%d/maps" % pid)
    except OSError:
        return []
    found: list[str] = []
    for s in sites:
        want = os.fsencode(s)
        i = raw.find(b" " + want)
        while i >= 0:
            end = raw.find(b"\n", i)
            end = len(raw) if end < 0 else end
            parts = raw[raw.rfind(b"\n", 0, i) + 1 : end].split(None, 5)
            if len(parts) == 6 and parts[5].startswith(want):
                path = os.fsdecode(parts[5])
                if path not in found:
                    found.append(path)
                    if first:
                        return found
            i = raw.find(b" " + want, end)
    return found


def _opened(pid: int, sites: list[str]) -> list[str]:
    """The files under `sites` (already _seen_sites) the process has open, at most _FDS
    looked at: a server holds sockets by the thousand, a module file only while it reads it."""
    out: list[str] = []
    try:
        fds = os.listdir("/proc/%d/fd" % pid)[:_FDS]
    except OSError:
        return out
    for fd in fds:
        try:
            path = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if path.startswith(tuple(sites)) and path not in out:
            out.append(path)
    return out


def _script(pid: int, argv: list[str], view: str) -> tuple[str, str]:
    """(path, text) of the program file argv runs (its first holders.SCRIPT_BYTES), ("", "")
    when it runs none. Read only when it is a regular file (asked of the file itself, then
    opened through the descriptor, without blocking): the path is the process's word, and
    the reader may be root (privsep's stage 0)."""
    from . import holders

    kind, path = holders.program(argv)
    if kind != "script":
        return "", ""
    if not os.path.isabs(path):
        try:
            path = os.path.join(os.readlink("/proc/%d/cwd" % pid), path)
        except OSError:
            return "", ""
    try:  # the file named first, without opening it: a device's open may act (a watchdog)
        where = os.open(view + path, getattr(os, "O_PATH", 0) | os.O_CLOEXEC)
    except OSError:
        return path, ""
    try:
        if not stat.S_ISREG(os.fstat(where).st_mode):
            return path, ""
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        fd = os.open("/proc/self/fd/%d" % where, flags)  # that very file, not its name again
        try:
            return path, os.read(fd, holders.SCRIPT_BYTES).decode("utf-8", "replace")
        finally:
            os.close(fd)
    except OSError:
        return path, ""
    finally:
        os.close(where)


def site_dirs() -> list[str]:
    """This environment's own site-packages dirs (real paths, "/"-terminated): its prefix's,
    never the base interpreter's that a venv with --system-site-packages also reads."""
    dirs = set()
    try:
        for d in site.getsitepackages([sys.prefix]):
            dirs.add(os.path.realpath(d).rstrip("/") + "/")
    except AttributeError:  # pragma: no cover - very old virtualenv's site.py
        pass
    return sorted(dirs)


def _boot_clock() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def now() -> float:
    """The write-time stamp to pass to `scan` (boot clock: what /proc start times count in)."""
    try:
        return _boot_clock()
    except (AttributeError, OSError):
        return -1.0


def from_wall(wall: float) -> float:
    """A wall-clock time (a file's mtime) on the boot clock, for `scan`."""
    try:
        return wall - (time.time() - _boot_clock())
    except (AttributeError, OSError):
        return -1.0


def scan(
    before: float,
    where: tuple[str, str, list[str]] | None = None,
    changes: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Processes of this environment that hold `changes` now, oldest first (holders.decide:
    the rule); `changes` None: every process of the environment started before `before` (a
    `now()` value). Each {"pid", "started" (UTC), "cmdline", "why"}.

    `where`: (interpreter, bin dir, site dirs) of the environment, real paths, for a caller
    that is not its interpreter (privsep's stage 0, asked by a worker that dropped root);
    without it, this interpreter's. A worker that dropped root asks stage 0 instead
    (rootscan.processes, the one caller for a worker).

    Never raises: a failure to inspect one process skips that process, and a host without
    /proc (or without CLOCK_BOOTTIME) yields an empty list.
    """
    if before < 0 or not os.path.isdir("/proc"):
        return []
    try:
        if where is None:
            where = (
                os.path.realpath(sys.executable),
                os.path.realpath(os.path.dirname(sys.executable)),
                site_dirs(),
            )
        return _scan(before, where, changes)
    except Exception:
        return []


def _scan(
    before: float, where: tuple[str, str, list[str]], changes: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    from . import holders

    hz = float(os.sysconf("SC_CLK_TCK"))
    wall_offset = time.time() - _boot_clock()
    found = holders.decide(_facts(before, where, changes, hz), changes, before)
    for p in found:
        p["started"] = _iso(p["started"] + wall_offset)
    return found


def _facts(
    before: float,
    where: tuple[str, str, list[str]],
    changes: list[dict[str, Any]] | None,
    hz: float,
) -> list[dict[str, Any]]:
    """What holders.decide reads, per process whose executable is the environment's
    interpreter binary: the rest of the host's processes are never read further."""
    from . import holders

    exe, bin_dir, sites = where
    skip = _ancestors(os.getpid())
    own_ns = _mnt_ns("self")
    try:
        ours: tuple[int, int] | None = (os.stat(exe).st_dev, os.stat(exe).st_ino)
    except OSError:
        ours = None  # (the interpreter's file is gone: the rules below still apply)
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        pid = int(name)
        try:
            view = _view(pid, own_ns)
            if not _runs(pid, exe, ours, view):
                continue
            fields = _stat_fields(pid)
            proc: dict[str, Any] = {
                "pid": pid,
                "ppid": int(fields[1]),  # field 4
                "started": int(fields[19]) / hz,  # field 22: clock ticks since boot
                "argv": _argv(pid),
            }
            if not holders.wanted(proc, changes, before):
                continue
            proc["bin"] = _in_bin_dir(pid, proc["argv"], bin_dir, view)
            if changes is not None or not proc["bin"]:
                proc["maps"] = _mapped(pid, sites, view)
            if changes is not None:
                proc.update(_held(pid, proc["argv"], sites, view))
            proc["parent_argv"] = _parent_argv(proc["ppid"])
        except (OSError, ValueError, IndexError):
            continue  # gone, a zombie, or another user's (no permission)
        out.append(proc)
    return out


def _runs(pid: int, exe: str, ours: tuple[int, int] | None, view: str) -> bool:
    """Is the process's executable our interpreter's very file (device and inode, seen
    through its own mount namespace)? The one check that rules out almost every process,
    in one system call; every process the rule accepts passes it."""
    if ours is not None:
        st = os.stat("/proc/%d/exe" % pid)
        if (st.st_dev, st.st_ino) != ours:
            return False
    # The kernel's link is already a real path (no symlink in it, "(deleted)" kept):
    # os.path.realpath would only re-walk it, an lstat per component and process.
    if not view and os.readlink("/proc/%d/exe" % pid) != exe:
        return False
    # (in another view its exe link shows a path in its own view; `ours` checked it)
    return not (view and ours is None and not _same_file("/proc/%d/exe" % pid, exe))


def _held(pid: int, argv: list[str], sites: list[str], view: str) -> dict[str, Any]:
    """The facts that tell which package a process has loaded: its cwd and open files under
    the site dirs (in its view, only under those that are our very directories), and the
    program file it runs."""
    seen = _seen_sites(sites, view)
    try:
        cwd = os.readlink("/proc/%d/cwd" % pid)
    except OSError:
        cwd = ""
    path, text = _script(pid, argv, view)
    return {
        "cwd": cwd if seen and (cwd + "/").startswith(tuple(seen)) else "",
        "fds": _opened(pid, seen) if seen else [],
        "script_path": path,
        "script": text,
    }


def _parent_argv(ppid: int) -> list[str]:
    try:
        return _argv(ppid)
    except (OSError, ValueError):
        return []


def changes(written: list[tuple[str, float]], sites: list[str]) -> list[dict[str, Any]]:
    """What holders.decide calls a change, per package, from the files written (real
    paths) and when (boot clock): the newest write of each package's files."""
    from . import holders

    every = _pth_imports(sites)
    out: dict[str, dict[str, Any]] = {}
    for path, at in written:
        top = next((s for s in sites if path.startswith(s)), "")
        module, where = _package(top, path) if top else ("", path)
        change = {
            "module": module,
            "path": where,
            "at": at,
            "every": not top or path.endswith(".pth") or holders.everyone(module, every),
        }
        if where in out:
            change["at"] = max(at, out[where]["at"])
        out[where] = change
    return [out[k] for k in sorted(out)]


def _package(top: str, path: str) -> tuple[str, str]:
    """(import name, directory) of the package `path` under `top` (a site dir) belongs to: its top
    directory, or deeper where the top is a namespace directory (no __init__.py) shared by
    distributions (`google/protobuf/`); a top-level module is its own file."""
    parts = path[len(top) :].split("/")
    if len(parts) == 1 or parts[0] == "__pycache__":
        module = parts[-1].split(".")[0]
        return module, path if len(parts) == 1 else top + module + ".py"

    def regular(depth: int) -> bool:
        return os.path.isfile(top + "/".join([*parts[:depth], "__init__.py"]))

    depth = 1
    while depth < len(parts) - 1 and not regular(depth):
        depth += 1
    if not regular(depth):
        depth = 1  # no regular package on the way: the top directory after all
    return ".".join(parts[:depth]), top + "/".join(parts[:depth]) + "/"


def _pth_imports(sites: list[str]) -> set[str]:
    """Modules the `.pth` files of `sites` import at every start (holders.pth_imports)."""
    from . import holders

    found: set[str] = set()
    for where in sites:
        try:
            names = [n for n in os.listdir(where) if n.endswith(".pth")]
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(where, name), "rb") as fh:
                    found |= holders.pth_imports(fh.read(1 << 16).decode("utf-8", "replace"))
            except OSError:
                continue
    return found


def _iso(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall)) + ".%02dZ" % (
        int(wall * 100) % 100
    )
