"""Import checks and functional probes, each in a fresh `python -I` of the target interpreter.

A fresh, isolated interpreter is the only honest test of "what the next server start will see":
nothing is cached from the agent, user site and PYTHON* variables are ignored. A probe that hangs
or crashes is a failed probe with its stderr tail, never an agent crash.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

# Runs in the child: import the module, then the probe code with `module` bound. The code comes
# on stdin and the module name in argv, so nothing from a spec is ever parsed by a shell.
_BOOT = (
    "import importlib,sys\n"
    "src=sys.stdin.read()\n"
    "module=importlib.import_module(sys.argv[1])\n"
    "exec(compile(src,'<probe>','exec'),{'module':module,'__name__':'__vpatch_probe__'})\n"
)


def _tail(text: str, limit: int = 600) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    out = lines[-1] if lines else ""
    return out[-limit:]


def _signal_name(num: int) -> str:
    try:
        return "%d (%s)" % (num, signal.Signals(num).name)
    except ValueError:
        return str(num)


def _kill_group(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """Kill the probe AND whatever it started: a grandchild holding our pipes open would
    otherwise make the final read wait for it (a probe that spawned `sleep 600` would hang the
    agent for 10 minutes after its own timeout)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    try:
        return proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # a descendant left the group and kept the pipes
        for fh in (proc.stdout, proc.stderr):
            if fh is not None:
                fh.close()
        proc.wait()
        return b"", b""


def run_one(module: str, code: str, timeout: float, python: str | None = None) -> dict[str, Any]:
    started = time.monotonic()
    # Own session (process group), so a timeout can kill everything the probe started. Its
    # stdin is its own pipe (the code, then EOF), never the agent's: the agent's stdin carries
    # the session's next requests, which a probe reading stdin would otherwise swallow.
    proc = subprocess.Popen(
        [python or sys.executable, "-I", "-c", _BOOT, module],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _out, err_bytes = proc.communicate(code.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        _out, err_bytes = _kill_group(proc)
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


def run(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run each {name, module, code, timeout} check; results in the same order."""
    out = []
    for c in checks:
        res = run_one(c["module"], c.get("code", ""), float(c.get("timeout", 120)))
        res["name"] = c["name"]
        out.append(res)
    return out
