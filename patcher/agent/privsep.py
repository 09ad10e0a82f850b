"""Privilege separation: root never runs the environment's code nor acts inside it as root.

Why: whoever owns an environment owns what its interpreter runs at start (`bin/python` itself,
every `.pth` file in its site-packages, any module a bare import can fall through to), and
can change any file in it between a check and a use. An agent started as root by that
interpreter ran the owner's code as root; one that confined its writes by path still wrote
where the owner's symlinks pointed. So when the agent would run as root (through `sudo`, or
a root login) it starts in two stages, OpenSSH-style:

1. **Stage 0, root, trusted interpreter** (`transports.bundle.BOOT0`: the host's python3, `-I -S`,
   so nothing but its own standard library runs). It checks itself (`trusted_problem`: its
   executable, the directories up to it and its standard library are root's and writable by
   no one else, ACLs included), then gathers the start of the trust closure as data
   (`env_facts`: the interpreter's path and real path, `pyvenv.cfg`, its `home` and the
   standard library found from there; closurefacts.py), never opening or running anything
   of it. `decide` names the user to work as by the closure's rule (closure.py): root stays
   when nobody else can write any of it, one other user is who works, more than one is a
   refusal unless the operator chose `--run-as` (argv[2]).
2. **The worker**: stage 0 forks; the child drops to the owner (`setgroups`, `setresgid`,
   `setresuid`, verified with `getres*id` and by a `setuid(0)` that must fail) and only then
   execs the environment's interpreter `-I -S -c CHILD_BOOT privsep`, the bundle re-fed on
   fd 3. The worker answers on the same stdout; its requests come through stage 0, which
   keeps the controller's stdin and answers the operator's own ops (relay.py). As the
   owner, everything the worker does (reads, writes, locks, the journal, compile checks
   with its own bytecode magic, probes and import checks) has only the owner's power: a
   link to root's file is a permission error, not a write.
   Before `site` runs (`settle`), the worker gathers the rest of the closure's start (site
   dirs, `.pth` files and what they add) and decides again: a root worker drops to the one
   other writer there, a dropped one refuses a second writer. With no drop to make, stage 0
   forks nothing: it becomes the worker, in this process when the environment's
   interpreter is this binary (`_same_interpreter`, `_become_worker`), else by an exec
   with the bundle in a sealed memfd (`_exec_in_place`); such a worker forks its own root
   helper if `settle` makes it drop (`_scan_helper`). Probes and import checks run as the
   closure's import part says (`probe_user`).
3. **What stays privileged**: the `/proc` scan for processes that still run old code
   (`procs.scan`), which must see other users' processes: read-only and bounded, the worker
   asks stage 0 over a pipe (rootscan.py): a time and the environment's site dirs, which
   stage 0 accepts only under the prefix it found itself; the answer is pids, start times
   and command lines. And the operator's ops (restart, health, fetch: relay.py), which stage 0
   reads from the controller itself, never from the worker.

Without root nothing of this runs: the transport starts the environment's interpreter as
before (`python -I -c BOOT`), which has only the login user's power.
"""

from __future__ import annotations

import os
import stat
import sys

from . import closure, closurefacts, rootscan
from .closurefacts import env_prefix, has_cfg, parse_pyvenv
from .rootscan import FD_ANSWER, FD_ASK

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent does not import typing (~4 ms per start)
    from typing import Any

    from .closure import Fact

# The worker's descriptors, set up by stage 0 before the exec: the bundle (read once), and
# the two ends of the restart-scan channel to stage 0 (rootscan.py, which asks on them).
FD_BUNDLE = 3
# What the worker was told and found is rootscan.STATE (the restart scan reads it there),
# written by `worker` below; agent/__init__ reads it by this name.
STATE = rootscan.STATE
ARG = "privsep"  # the worker's argv[1] (`-c CHILD_BOOT privsep MARK`)
# MARK: "1" dropped by stage 0, "0" root still (stage 0 waits), IN_PLACE root still and
# stage 0 exec'd into the worker (no parent to ask for scans).
IN_PLACE = "2"
KIND = "privsep"  # agent error kind: stage 0 or the worker refused to go on
_SITES_MAX = 32


class Refusal(Exception):
    """Why the agent does not go on as root (said as every request's answer)."""


# ---------------------------------------------------------------------------------------------
# Pure: the layout and the decision, from facts gathered by the edges below


def decide(
    euid: int, facts: list[Fact], run_as: int | None = None, owner: int | None = None
) -> int | None:
    """The uid to work as (None: stay as we are), from the facts of what the environment's
    code will read (closure.py: the interpreter's path and real path, its pyvenv.cfg and
    `home`, its standard library; in the worker, its site dirs, `.pth` files and what they
    add): not root, nothing to drop; else the closure's rule (closure.decide)."""
    if euid != 0:
        if run_as is not None and run_as != euid:
            raise Refusal(
                "--run-as uid %d: this agent runs as uid %d, not root, and cannot become "
                "another user (--sudo, or a root login, makes it root)" % (run_as, euid)
            )
        return None
    try:
        return closure.decide(facts, closurefacts.members(facts), run_as, owner)
    except closure.Refusal as exc:
        raise Refusal(str(exc)) from None


def trusted_problem(facts: list[Fact]) -> str:
    """Why the interpreter stage 0 runs under is not to be trusted as root ("" when it is):
    anything of it that someone but root can write (owner, mode bits, ACL)."""
    groups = closurefacts.members(facts)
    for f in facts:
        path, uid = f[0], f[1]
        if uid != 0:
            return "%s is owned by uid %d, not root" % (path, uid)
        for kind, ident in sorted(closure.writers(f)):
            if kind == "group" and groups.get(ident, frozenset({-1})) <= {0}:
                continue
            if (kind, ident) != ("user", 0):
                return "%s is writable by %s (mode %o)" % (
                    path,
                    closure._label((kind, ident)),
                    stat.S_IMODE(f[3]),
                )
    return ""


# ---------------------------------------------------------------------------------------------
# Edges: facts from the file system (lstat only: nothing of the environment is opened)


def env_facts(executable: str) -> list[Fact]:
    """What the environment's interpreter reads before any of its own code could be checked,
    for `decide`: its path and real path, its pyvenv.cfg, the `home` that file names (a
    `--copies` venv runs its own binary with `home`'s standard library) and that standard
    library's whole tree (but its site dirs, which the worker checks, and but the trusted
    interpreter's own, which stage 0 checked as itself)."""
    facts = closurefacts.chain(executable)
    prefix = env_prefix(executable, has_cfg)
    cfg = os.path.join(prefix, "pyvenv.cfg")
    start = os.path.dirname(os.path.realpath(executable))
    version = _version(os.path.basename(os.path.realpath(executable)))
    if has_cfg(prefix):
        facts.append(closurefacts.fact(cfg))
        found = parse_pyvenv(closurefacts.read_pth(cfg))
        home = found.get("home", "")
        version = _version(found.get("version", "") or found.get("version_info", "")) or version
        if home:
            facts += [f for f in closurefacts.chain(home, True) if f not in facts]
            start = home
    if _same_interpreter(executable):
        return facts  # this very binary and its standard library: checked as the trusted one
    ours = os.path.realpath(os.path.dirname(os.__file__))
    for lib in closurefacts.stdlib_dirs(start, version):
        if os.path.realpath(lib) != ours:
            facts += closurefacts.chain(lib) + closurefacts.tree(lib, closurefacts.STDLIB_SKIP)
    return facts


def _version(text: str) -> str:
    """ "3.11" from pyvenv.cfg's "3.11.2" or an interpreter's name "python3.11" ("" if none)."""
    parts = text.replace("python", "").split(".")
    return (
        "%s.%s" % tuple(parts[:2]) if len(parts) > 1 and all(p.isdigit() for p in parts[:2]) else ""
    )


def _which(name: str) -> str:
    if "/" in name:
        return os.path.abspath(name)
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        cand = os.path.join(d or ".", name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    raise Refusal("python %r not found on PATH" % name)


def drop(uid: int) -> None:
    """Become `uid` for good: its groups, gid and uid (real, effective, saved), verified."""
    import pwd

    try:
        pw = pwd.getpwuid(uid)
        name, gid, home = pw.pw_name, pw.pw_gid, pw.pw_dir
        groups = sorted(set(os.getgrouplist(name, gid)))
    except KeyError:  # no passwd entry: its own uid as gid, no other group
        name, gid, home, groups = str(uid), uid, "/", [uid]
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise Refusal("could not drop to uid %d" % uid)
    if sorted(set(os.getgroups())) != groups:
        raise Refusal("could not drop the groups of uid %d" % uid)
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:
        raise Refusal("uid %d could become root again" % uid)
    os.environ.update({"HOME": home, "USER": name, "LOGNAME": name})


# ---------------------------------------------------------------------------------------------
# Stage 0 (root, trusted interpreter)


def stage0(bundle: str) -> None:
    """Run by transports.bundle.BOOT0 with the bundle it read: decide, fork the worker, serve its
    restart scans, end as it ended. A refusal answers every request with it."""
    run_as: int | None = None
    try:
        python = _which(sys.argv[1] if len(sys.argv) > 1 else "")
    except Refusal as exc:
        _not_found(str(exc))
    if not os.path.isfile(python):  # as a shell says it: the transport's missing-python error
        _not_found("%s: not found" % python)
    try:
        # (Not root: no power to guard. The shell takes this path for a user who owns `/`.)
        why = trusted_problem(_trusted_facts()) if os.geteuid() == 0 else ""
        if why:
            raise Refusal("the trusted interpreter %s: %s" % (sys.executable, why))
        run_as = _run_as(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None
        uid = decide(os.geteuid(), env_facts(python), run_as)
    except (Refusal, OSError) as exc:
        _refuse_forever(str(exc) if isinstance(exc, Refusal) else _oserror(exc))
        return
    boot = _child_boot(bundle)
    extra = [str(run_as)] if run_as is not None else []  # the worker's closure decides by it
    if uid is None and _same_interpreter(python):
        _become_worker(python, extra)  # root stays, this very interpreter: no second start
        return
    if uid is None and hasattr(os, "memfd_create"):
        _exec_in_place(python, boot, bundle, extra)  # root stays: no second process
    bundle_r, bundle_w = os.pipe()
    ask_r, ask_w = os.pipe()
    answer_r, answer_w = os.pipe()
    req_r, req_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        try:
            os.dup2(req_r, 0)  # its requests: what stage 0 passes on (_serve)
            for fd, want in ((bundle_r, FD_BUNDLE), (ask_w, FD_ASK), (answer_r, FD_ANSWER)):
                os.dup2(fd, want + 10)
            for fd in (bundle_r, bundle_w, ask_r, ask_w, answer_r, answer_w, req_r, req_w):
                os.close(fd)
            for want in (FD_BUNDLE, FD_ASK, FD_ANSWER):
                os.dup2(want + 10, want)
                os.close(want + 10)
            if uid is not None:
                drop(uid)
            mark = "1" if uid is not None else "0"  # dropped here, or root still
            os.execv(python, [python, "-I", "-S", "-c", boot, ARG, mark, *extra])
        except BaseException as exc:  # the worker never returns into stage 0
            err = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            who = "uid %d, the environment's owner" % uid if uid is not None else "root"
            os.write(2, ("vpatch agent: cannot run %s as %s: %s\n" % (python, who, err)).encode())
            os._exit(126)
    for fd in (bundle_r, ask_w, answer_r, req_r):
        os.close(fd)
    try:
        data = bundle.encode("latin-1")
        while data:
            data = data[os.write(bundle_w, data) :]
    except OSError:
        pass  # the worker is gone: its status says why
    os.close(bundle_w)
    prefix = os.path.realpath(os.path.dirname(os.path.dirname(python)))
    _serve(req_w, ask_r, answer_w, python, prefix)
    _exit_as(pid)


def _run_as(name: str) -> int:
    """--run-as USER: a user name, or a uid, of this host."""
    import pwd

    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        if name.isdigit():
            return int(name)
        raise Refusal("--run-as %r: no such user on this host" % name) from None


def run_as_refusal(name: str) -> str:
    """Why a non-root agent (the plain start, `python -I -c BOOT run-as USER`) refuses
    --run-as USER ("" when USER is who it runs as already)."""
    try:
        decide(os.geteuid(), [], _run_as(name))
    except Refusal as exc:
        return str(exc)
    return ""


def _same_interpreter(python: str) -> bool:
    """Whether `python -I -S` would start as this very interpreter: the same binary (one
    file), and the same standard library (a venv's `home` is this binary's directory; no
    venv: the same directory, so the same landmarks). Then the worker needs no second start:
    `sys.executable` set to `python` gives `site` (run by `settle`, after its checks) the venv
    exactly as that start would have found it. Read only where `decide` found everything of
    the environment root's and closed to others (its pyvenv.cfg included)."""
    try:
        if not os.path.samestat(os.stat(sys.executable), os.stat(python)):
            return False
        here = os.path.realpath(os.path.dirname(sys.executable))
        prefix = env_prefix(python, has_cfg)
        if not has_cfg(prefix):
            return os.path.realpath(os.path.dirname(python)) == here
        with open(os.path.join(prefix, "pyvenv.cfg"), encoding="utf-8", errors="replace") as fh:
            home = parse_pyvenv(fh.read(1 << 16)).get("home", "")
    except OSError:
        return False
    return bool(home) and os.path.realpath(home) == here


def _become_worker(python: str, extra: list[str]) -> None:
    """Stage 0 goes on as the worker in this process (`_same_interpreter`): the argv and
    `sys.executable` the exec would have given, the agent package imported afresh from the
    bundle's importer (stage 0's own modules forgotten, but the closure's two, which keep no
    state, and this module and rootscan, whose only state, STATE and _PROBE_USERS, stage 0
    never writes and is emptied here as a fresh import leaves it: the worker imports them
    anyway, and each load is host CPU, ~0.4 ms for the two), then the agent's main loop on
    the same stdin, of which stage 0 read exactly the bundle."""
    sys.executable = python
    sys.argv[:] = ["-c", ARG, IN_PLACE, *extra]
    keep = ("closure", "closurefacts", "privsep", "rootscan")  # loaded once, by stage 0
    rootscan.STATE.clear()
    _PROBE_USERS.clear()
    for name in [n for n in sys.modules if n.split(".")[0] == "vpatch_agent"]:
        if name.partition(".")[2] not in keep:
            del sys.modules[name]
    __import__("vpatch_agent").main()
    os._exit(0)  # (main ends the process itself at EOF)


def _exec_in_place(python: str, boot: str, bundle: str, extra: list[str]) -> None:
    """Become the worker, root still: the bundle in a sealed memfd on FD_BUNDLE, then exec.

    Where no drop is needed there is nothing for a second process to keep apart: stage 0
    would only wait for the worker and serve scans a root worker never asks. So the process
    that checked the environment becomes its interpreter (the same checks, the same argv,
    the same -I -S and `settle` before `site`), and pays neither a fork, nor a pipe the
    bundle is copied through, nor an idle root parent. The memfd is anonymous memory, sealed
    against writes before the exec: no path names it and nothing can change it. A worker that
    `settle` makes drop (someone else's .pth) forks its own root scan helper first (mark
    IN_PLACE)."""
    try:
        fd = os.memfd_create("vpatch-bundle", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        data = bundle.encode("latin-1")
        while data:
            data = data[os.write(fd, data) :]
        import fcntl

        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        os.lseek(fd, 0, os.SEEK_SET)
        if fd != FD_BUNDLE:
            os.dup2(fd, FD_BUNDLE)  # inheritable
            os.close(fd)
        else:
            os.set_inheritable(fd, True)
        os.execv(python, [python, "-I", "-S", "-c", boot, ARG, IN_PLACE, *extra])
    except BaseException as exc:
        err = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        os.write(2, ("vpatch agent: cannot run %s as root: %s\n" % (python, err)).encode())
        os._exit(126)


def _scan_helper() -> None:
    """In a worker stage 0 became (IN_PLACE) that drops in `settle`: fork, before the drop,
    the root helper stage 0 would have been (`_serve`: the operator's requests and the
    restart scan), wired to FD_ASK and FD_ANSWER, the worker's stdin a pipe from it. It runs
    the root-owned interpreter before `site`, as the worker itself did up to here, and ends
    when the worker closes its end."""
    ask_r, ask_w = os.pipe()
    answer_r, answer_w = os.pipe()
    req_r, req_w = os.pipe()
    if os.fork() == 0:
        try:
            for fd in (ask_w, answer_r, req_r):
                os.close(fd)
            python = sys.executable
            prefix = os.path.realpath(os.path.dirname(os.path.dirname(python)))
            _serve(req_w, ask_r, answer_w, python, prefix)
        finally:
            os._exit(0)
    for fd in (ask_r, answer_w, req_w):
        os.close(fd)
    os.dup2(req_r, 0)  # the controller's requests now come through the helper
    os.close(req_r)
    for fd, want in ((ask_w, FD_ASK), (answer_r, FD_ANSWER)):
        if fd != want:
            os.dup2(fd, want)
            os.close(fd)


def _not_found(why: str) -> None:
    os.write(2, ("vpatch agent: %s\n" % why).encode())
    os._exit(127)


def _trusted_facts() -> list[Fact]:
    facts = closurefacts.chain(sys.executable)
    stdlib = os.path.dirname(os.__file__)
    return facts + [f for f in closurefacts.chain(stdlib) if f not in facts]


def _oserror(exc: OSError) -> str:
    return "%s%s" % (exc.strerror or exc, " (%s)" % exc.filename if exc.filename else "")


def _child_boot(bundle: str) -> str:
    """The worker's loader, carried by the bundle (`#child`, transport.CHILD_BOOT)."""
    from _json import scanstring

    key = '"#child": "'
    i = bundle.index(key) + len(key)
    return scanstring(bundle, i)[0]


def _exit_as(pid: int) -> None:
    """End the way the worker ended (a signal as that signal: the transport reads a kill)."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        import signal

        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _serve(worker_in: int, ask: int, answer: int, python: str, prefix: str) -> None:
    """Be the root side of a dropped worker until it ends (relay.serve): the controller's
    requests pass through here to `worker_in`, the operator's own are answered here, and
    so are the worker's restart scans. A scan question is data from the owner's process: a
    number, at most _SITES_MAX paths, each under `prefix`, and the changed packages
    (holders.valid_changes keeps those under these paths)."""
    exe = os.path.realpath(python)
    bin_dir = os.path.realpath(os.path.dirname(python))

    def scan(line: bytes) -> bytes:
        from . import procs, wire  # (a worker that never asks costs stage 0 neither)

        found = _scan_for(wire, procs, line, exe, bin_dir, prefix)
        return (wire.dumps(found) + "\n").encode("ascii")

    from . import relay

    relay.serve(0, worker_in, ask, answer, scan)


def _scan_for(
    wire: Any, procs: Any, line: bytes, exe: str, bin_dir: str, prefix: str
) -> list[dict[str, Any]]:
    try:
        q = wire.loads(line.decode("ascii"))
        before, sites = float(q["before"]), q["sites"]
    except (ValueError, KeyError, TypeError):
        return []
    base = prefix.rstrip(os.sep) + os.sep
    ok = (
        [
            s
            for s in sites[:_SITES_MAX]
            if isinstance(s, str) and os.path.normpath(s) + os.sep == s and s.startswith(base)
        ]
        if isinstance(sites, list)
        else []
    )
    from . import holders

    changes = holders.valid_changes(q.get("changes"), ok, rootscan.CHANGES_MAX)
    return procs.scan(before, (exe, bin_dir, ok), changes)  # type: ignore[no-any-return]


def _refuse_forever(why: str) -> None:
    """Answer every request line with the refusal (one-shot callers: their one request)."""
    from . import protocol, wire

    res = protocol.error(KIND, why)
    res["pid"] = os.getpid()
    out = (wire.dumps(res) + "\n").encode("utf-8")
    for line in iter(sys.stdin.buffer.readline, b""):
        if line.strip():
            os.write(1, out)
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# The worker (the environment's interpreter, as the owner or as root for a root-owned one)


def worker(argv: list[str]) -> None:
    """Before anything else in the worker: the start of the trust closure (`_start_facts`:
    what `site` will read and run), decided (closure.decide) while `site` has not run: root
    drops to the one other user who can write any of it, a worker stage 0 dropped refuses to
    go on when someone else can write it too (unless the operator chose --run-as); then run
    `site` as the interpreter would have without -S; as root, under closure.GUARD (a code
    file another user could write that `site` would run, a `.pth`'s deep import included,
    is refused and the worker refuses every request naming it)."""
    rootscan.STATE["dropped_from"] = 0 if argv[1:2] == ["1"] else None
    rootscan.STATE["run_as"] = int(argv[2]) if len(argv) > 2 and argv[2].isdigit() else None
    try:
        euid = os.geteuid()
        if euid == 0 or rootscan.STATE["dropped_from"] == 0:
            import site

            facts, rootscan.STATE["sites"] = closurefacts.start_facts(site)
            rootscan.STATE["facts"] = facts
            uid = decide(0, facts, rootscan.STATE["run_as"], euid or None)
            if euid == 0 and uid is not None:
                if argv[1:2] == [IN_PLACE]:
                    _scan_helper()
                drop(uid)
                rootscan.STATE["dropped_from"] = 0
        import site

        guard: dict[str, Any] = {}
        if os.geteuid() == 0:  # root runs `site`: every code file it opens is checked first
            exec(closure.GUARD, guard)
        site.main()
        if guard:
            guard["_vp_on"][0] = 0  # the environment's code ran; the agent reads files as data
            if guard["_vp_said"]:  # `site` reports a failed .pth line and goes on: we do not
                raise Refusal(guard["_vp_said"][0])
    except (Refusal, OSError) as exc:
        rootscan.STATE["refused"] = str(exc) if isinstance(exc, Refusal) else _oserror(exc)
    rootscan.STATE["uid"] = os.geteuid()


def probe_user(modules: list[str]) -> int | None:
    """As whom the probes and import checks that import `modules` run: None as this worker
    is, else the uid to start them as (only a root worker gets one). The closure's import
    part, once per worker and set of top-level packages: the start's facts and each
    package's whole tree as the import system finds it (`find_spec`: nothing imported), and
    every entry of the site dirs and added dirs (one package directory another user owns is
    imported by name by whatever imports it). Refusal: more than one writer."""
    tops = tuple(sorted({m.split(".")[0] for m in modules if m}))
    if tops in _PROBE_USERS:
        return _PROBE_USERS[tops]
    euid = os.geteuid()
    if "uid" not in STATE or (euid != 0 and STATE.get("dropped_from") is None):
        return None  # no privsep start (in-process), or no root to guard: the login user's
    facts = list(STATE.get("facts") or [])
    facts += closurefacts.import_facts(tops, list(STATE.get("sites") or []))
    uid = decide(0, facts, STATE.get("run_as"), euid or None)
    found = uid if euid == 0 else None
    _PROBE_USERS[tops] = found
    return found


_PROBE_USERS: dict[tuple[str, ...], int | None] = {}


def user_kwargs(uid: int) -> dict[str, Any]:
    """subprocess.Popen's arguments that start a child as `uid` (its groups, gid, uid; the
    environment's HOME and names), as `drop` becomes it."""
    import pwd

    try:
        pw = pwd.getpwuid(uid)
        name, gid, home = pw.pw_name, pw.pw_gid, pw.pw_dir
        groups = sorted(set(os.getgrouplist(name, gid)))
    except KeyError:
        name, gid, home, groups = str(uid), uid, "/", [uid]
    env = dict(os.environ, HOME=home, USER=name, LOGNAME=name)
    # cwd "/": the worker's own (root's home over SSH) may be closed to that user
    return {"user": uid, "group": gid, "extra_groups": groups, "env": env, "cwd": "/"}
