"""Import checks and functional probes, each in a fresh `python -I` of the target interpreter.

A fresh, isolated interpreter is the only honest test of "what the next server start will see":
nothing is cached from the agent, user site and PYTHON* variables are ignored. A probe that hangs
or crashes is a failed probe with its stderr tail, never an agent crash.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from . import closure

if TYPE_CHECKING:
    from .protocol import Check

# Runs in the child: import the module, then the probe code with `module` bound. The code comes
# on stdin and the module name in argv, so nothing from a spec is ever parsed by a shell. A
# thread blocks on argv[2], the read end of a pipe only the agent holds the write end of: when
# the agent is gone however it ended (SIGKILL by a transport's timeout, the OOM killer, EOF), the
# read returns and the probe kills its own process group, so no probe outlives its agent.
_BOOT = (
    "import importlib,sys\n"
    "import os,_thread\n"
    "def _watch(fd):\n"
    "    try:\n"
    "        os.read(fd,1)\n"
    "    except OSError:\n"
    "        return\n"
    "    os.killpg(0,9)\n"
    "_thread.start_new_thread(_watch,(int(sys.argv[2]),))\n"
    "src=sys.stdin.read()\n"
    "module=importlib.import_module(sys.argv[1])\n"
    "exec(compile(src,'<probe>','exec'),{'module':module,'__name__':'__vpatch_probe__'})\n"
)
_CALLER = 1  # the agent's stdout: a pipe or socket to the transport (POLLERR/POLLHUP: gone)
OUTPUT_TAIL = 64 * 1024  # stderr kept per probe (its last line is the detail): never it all


def _tail(text: str, limit: int = 600) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    out = lines[-1] if lines else ""
    return out[-limit:]


def _signal_name(num: int) -> str:
    try:
        return "%d (%s)" % (num, signal.Signals(num).name)
    except ValueError:
        return str(num)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the probe AND whatever it started (its own process group): a grandchild holding our
    pipes open would otherwise keep the final read waiting (a probe that spawned `sleep 600`
    would hang the agent for 10 minutes after its own timeout)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


def _collect(proc: subprocess.Popen[bytes], code: bytes, deadline: float) -> tuple[bool, bytes]:
    """Feed the code, drain stdout (dropped) and stderr (its tail kept) until both end or the
    deadline passes: (timed out, stderr tail). Never more than OUTPUT_TAIL bytes in memory,
    however much the probe prints."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    todo = memoryview(code)
    os.set_blocking(proc.stdin.fileno(), False)
    if not todo:
        proc.stdin.close()
    outs = {proc.stdout.fileno(): False, proc.stderr.fileno(): True}  # fd -> keep its tail
    err = bytearray()
    timed_out, grace = False, 0.0
    try:
        mode = os.fstat(_CALLER).st_mode
        watch_caller = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
    except OSError:
        watch_caller = False
    while outs:
        left = deadline - time.monotonic()
        if left <= 0 and not timed_out:
            timed_out = True
            _kill_group(proc)
            grace = time.monotonic() + 5  # a descendant that left the group keeps the pipes
        if timed_out and time.monotonic() > grace:
            break
        poller = select.poll()
        for fd in outs:
            poller.register(fd, select.POLLIN)
        if watch_caller:  # no events asked: POLLERR/POLLHUP come anyway
            poller.register(_CALLER, 0)
        if todo:
            poller.register(proc.stdin.fileno(), select.POLLOUT)
        wait = (grace - time.monotonic()) if timed_out else left
        for fd, ev in poller.poll(max(0.0, min(wait, 1.0)) * 1000):
            if fd == _CALLER:
                if ev & (select.POLLERR | select.POLLHUP):  # nobody will read the result
                    _kill_group(proc)
                    raise SystemExit("caller gone")
                continue
            if todo and fd == proc.stdin.fileno():
                try:
                    todo = todo[os.write(fd, todo[: 1 << 16]) :]
                except BlockingIOError:
                    pass
                except OSError:  # the probe ended without reading it all
                    todo = todo[:0]
                if not todo:
                    proc.stdin.close()
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                del outs[fd]
            elif outs[fd]:
                err += chunk
                del err[:-OUTPUT_TAIL]
    if todo:
        proc.stdin.close()
    if not timed_out:  # its output ended; the probe itself may not have (it closed them)
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        _kill_group(proc)
    proc.wait()
    return timed_out, bytes(err)


def run_one(
    module: str,
    code: str,
    timeout: float,
    python: str | None = None,
    user: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`user`: Popen's arguments that start the probe as another uid (privsep.user_kwargs:
    the one user the trust closure says may write what it imports)."""
    started = time.monotonic()
    # Own session (process group), so a timeout can kill everything the probe started. Its
    # stdin is its own pipe (the code, then EOF), never the agent's: the agent's stdin carries
    # the session's next requests, which a probe reading stdin would otherwise swallow.
    watch_r, watch_w = os.pipe()
    as_root = user is None and os.geteuid() == 0
    # as root: closure.GUARD checks every code file opened, `site` included (so -S, then site)
    guard = closure.GUARD + "import site\nsite.main()\n"
    boot = ["-I", "-S", "-c", guard + _BOOT] if as_root else ["-I", "-c", _BOOT]
    try:
        proc = subprocess.Popen(
            [python or sys.executable, *boot, module, str(watch_r)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(watch_r,),
            **(user or {}),
        )
    finally:
        os.close(watch_r)
    try:
        timed_out, err_bytes = _collect(proc, code.encode(), started + timeout)
    finally:
        for fh in (proc.stdout, proc.stderr):
            if fh is not None:
                fh.close()
        os.close(watch_w)
    if timed_out:
        tail = _tail(err_bytes.decode("utf-8", "replace"))
        detail = "timed out after %gs (killed)" % timeout + ("; " + tail if tail else "")
        return {"ok": False, "detail": detail, "seconds": round(time.monotonic() - started, 3)}
    seconds = round(time.monotonic() - started, 3)
    if proc.returncode == 0:
        return {"ok": True, "detail": "passed", "seconds": seconds}
    err = _tail(err_bytes.decode("utf-8", "replace"))
    if proc.returncode < 0:
        err = "killed by signal %s%s" % (_signal_name(-proc.returncode), "; " + err if err else "")
    return {"ok": False, "detail": err or "exit status %d" % proc.returncode, "seconds": seconds}


def run(checks: list[Check]) -> list[dict[str, Any]]:
    """Run each {name, module, code, timeout} check; results in the same order. Each runs
    as the trust closure of what it imports says (privsep.probe_user): as this worker, as
    the one other user who can write it, or not at all (each check then fails with why)."""
    from . import privsep

    user: dict[str, Any] | None = None
    try:
        uid = privsep.probe_user([c["module"] for c in checks])
        if uid is not None:
            user = privsep.user_kwargs(uid)
    except (privsep.Refusal, OSError) as exc:
        why = str(exc) if isinstance(exc, privsep.Refusal) else privsep._oserror(exc)
        return [{"ok": False, "detail": why, "seconds": 0.0, "name": c["name"]} for c in checks]
    out = []
    for c in checks:
        res = run_one(c["module"], c.get("code", ""), float(c.get("timeout", 120)), user=user)
        res["name"] = c["name"]
        out.append(res)
    return out
