"""Which running processes still execute code from before a write ("restart required").

A Python process reads a module's source once, at import; replacing the file later changes
nothing in it. So after vpatch writes (apply or rollback), every process of the patched
environment that started BEFORE the write may still run the old code and needs a restart.

Linux only (/proc); elsewhere the scan finds nothing. The rule, per process (threads are not
listed in /proc, so each pid is a process):

1. `/proc/PID/exe` resolves to the same file as this environment's interpreter. A venv's
   `bin/python` is a symlink to its base interpreter, so this alone cannot tell two venvs of one
   base apart; it only rules out everything that is not that Python.
2. AND the process is of THIS environment, shown by either
   a. its argv[0], resolved the way Python itself resolves it to find `pyvenv.cfg` (relative:
      against /proc/PID/cwd; a bare name: along the PATH in /proc/PID/environ), lies in the
      environment's bin directory. That covers `ENV/bin/python -m ...`, `python ...` with the
      venv on PATH, and console scripts (`ENV/bin/vllm serve`: the kernel runs the shebang
      interpreter, so argv[0] is `ENV/bin/python`); or
   b. it maps a file under the environment's site-packages (/proc/PID/maps): an extension
      module loaded from there. That covers processes that rewrote their argv (setproctitle;
      vLLM titles its engine processes `VLLM::EngineCore`).
3. AND it started before the write: /proc/PID/stat field 22 (clock ticks since boot, 10 ms
   resolution) against the write time on the same boot clock, so a process started a moment
   after the write is never reported and a wall-clock jump cannot confuse the comparison.

Paths in /proc/PID (argv[0], cwd, PATH, maps) are the PROCESS's view. A process in another
mount namespace (a container sharing the host's PID namespace, `docker --pid=host`, hostPID
pods) may show the very same path string for a different environment, so for those the
directories are compared by identity (device and inode) through /proc/PID/root, never by name.

The agent itself and its ancestors (the shell or sshd that started it, the vpatch CLI) are
excluded, and so are other vpatch agents and what they started (probes): an agent session lives
for a whole run, so a concurrent run's agent on this env would otherwise look like a stale
server. Without root, other users' processes cannot be inspected and are not listed.
The rule is deliberately conservative: a process of the environment that never imported the
patched module is listed too (which modules a process imported is not visible from outside).
"""

from __future__ import annotations

import os
import site
import sys
import time

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_CMDLINE_MAX = 300


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name (which may contain spaces and ')')."""
    raw = _read("/proc/%d/stat" % pid).decode("ascii", "replace")
    return raw[raw.rindex(")") + 2 :].split()


def _ppid(pid: int) -> int:
    return int(_stat_fields(pid)[1])  # field 4


def _start_ticks(pid: int) -> int:
    return int(_stat_fields(pid)[19])  # field 22: starttime, in clock ticks since boot


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


def _is_agent(argv: list[str]) -> bool:
    """`python -I -c BOOT` (transports.bundle.BOOT imports vpatch_agent; no server does), or
    privsep's stage 0 (BOOT0 starts vpatch_agent.privsep), which may go on as the worker in
    its own process when it drops nothing."""
    for i in range(len(argv) - 1):  # (no itertools.pairwise: the agent runs on 3.9)
        if argv[i] == "-c" and (
            "import vpatch_agent\n" in argv[i + 1] or "vpatch_agent.privsep" in argv[i + 1]
        ):
            return True
    return False


def _agent_or_child(pid: int, argv: list[str]) -> bool:
    if _is_agent(argv):
        return True
    try:
        return _is_agent(_argv(_ppid(pid)))
    except (OSError, ValueError, IndexError):
        return False


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
    """Does the process map a file under one of `sites` (/proc/PID/maps)? The bytes are
    searched for " SITE" (a path column follows the padding; the other columns hold no "/"),
    and only a line with a hit is split to check it: a torch process maps thousands of
    files, and splitting every line cost most of the scan's CPU.

    In another mount namespace a hit counts only where the process's own SITE is our very
    directory, so that is asked first (one stat per site): where it is none of them, the
    maps cannot hold a hit and are not read. The kernel writes a maps line per mapping with
    its path resolved (~0.1 ms per 100 lines), and a host's other containers and envs of
    the same interpreter are exactly the processes that get this far."""
    if view:
        sites = [s for s in sites if _same_file(view + s, s)]
        if not sites:
            return False
    try:
        raw = _read("/proc/%d/maps" % pid)
    except OSError:
        return False
    for s in sites:
        want = os.fsencode(s)
        i = raw.find(b" " + want)
        while i >= 0:
            end = raw.find(b"\n", i)
            end = len(raw) if end < 0 else end
            parts = raw[raw.rfind(b"\n", 0, i) + 1 : end].split(None, 5)
            if len(parts) == 6 and parts[5].startswith(want):
                return True
            i = raw.find(b" " + want, end)
    return False


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


def scan(before: float, where: tuple[str, str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Processes of this environment started before `before` (a `now()` value), oldest first.

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
        return _scan(before, where)
    except Exception:
        return []


def _scan(before: float, where: tuple[str, str, list[str]] | None) -> list[dict[str, Any]]:
    if where is None:
        exe = os.path.realpath(sys.executable)
        bin_dir = os.path.realpath(os.path.dirname(sys.executable))
        sites = site_dirs()
    else:
        exe, bin_dir, sites = where
    skip = _ancestors(os.getpid())
    own_ns = _mnt_ns("self")
    hz = float(os.sysconf("SC_CLK_TCK"))
    wall_offset = time.time() - _boot_clock()
    try:
        ours: tuple[int, int] | None = (os.stat(exe).st_dev, os.stat(exe).st_ino)
    except OSError:
        ours = None  # (the interpreter's file is gone: the rules below still apply)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        pid = int(name)
        try:
            # First the one check that rules out almost every process, in one system call:
            # is its executable our interpreter's very file (device and inode, seen through
            # its own mount namespace)? Every process the rules below accept passes it.
            if ours is not None:
                st = os.stat("/proc/%d/exe" % pid)
                if (st.st_dev, st.st_ino) != ours:
                    continue
            view = _view(pid, own_ns)
            # The kernel's link is already a real path (no symlink in it, "(deleted)" kept):
            # os.path.realpath would only re-walk it, an lstat per component and process.
            if not view and os.readlink("/proc/%d/exe" % pid) != exe:
                continue
            if view and ours is None and not _same_file("/proc/%d/exe" % pid, exe):
                continue  # (its exe link shows a path in its own view; `ours` checked it)
            argv = _argv(pid)
            if _is_agent(argv):
                continue  # (first: other agents are most of the same binary's processes)
            started = _start_ticks(pid) / hz
            if started >= before:
                continue
            if not (_in_bin_dir(pid, argv, bin_dir, view) or _maps_site(pid, sites, view)):
                continue  # (first: most processes of the same binary are other envs')
            if _agent_or_child(pid, argv):
                continue
        except (OSError, ValueError, IndexError):
            continue  # gone, a zombie, or another user's (no permission)
        found.append((started, pid, argv))
    found.sort()
    return [
        {
            "pid": pid,
            "started": _iso(started + wall_offset),
            "cmdline": " ".join(argv)[:_CMDLINE_MAX],
        }
        for started, pid, argv in found
    ]


def _iso(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall)) + ".%02dZ" % (
        int(wall * 100) % 100
    )
