"""`restart_required` names only the processes that hold the changed code now, on real
processes of a real venv (patcher/agent/holders.py has the rule, tests/cases/restart/ its cases).

The host: a fake supervisor that is a Python of the environment (`ENV/bin/python -I sup.py`,
as supervisord runs from a server's venv) and never imports the package, with the server it
runs and restarts on SIGHUP; a second server under `sh -c` (a shell is no Python); a server of
another venv of the same interpreter, with its own copy of the package. A `vpatch rollout`
whose restart goes through the supervisor, then verify, status and rollback, each listing
exactly the servers that still run code from before the last write.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import envs
from tests.conftest import Env, vpatch
from tests.support.standin_specs import SPEC_A, write

# A server: imports the package, says so with its pid, then waits on stdin.
SERVER = """import os, sys
import servekit.config
print("ready", os.getpid(), flush=True)
sys.stdin.read()
"""

# A supervisor of the environment's interpreter that imports nothing of the package: runs
# the server, and on SIGHUP stops it, waits for it and runs a new one (its pid in PIDFILE
# once it is ready), as `supervisorctl restart` does.
SUPERVISOR = """import os, signal, subprocess, sys
pidfile, server = sys.argv[1], sys.argv[2:]
child = None
def start():
    global child
    child = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready, pid = child.stdout.readline().split()
    with open(pidfile + ".new", "w") as fh:
        fh.write(pid)
    os.rename(pidfile + ".new", pidfile)
def restart(*_):
    child.kill()
    child.wait()
    start()
start()
signal.signal(signal.SIGHUP, restart)
print("ready", os.getpid(), flush=True)
sys.stdin.read()
child.kill()
child.wait()
"""


@dataclass
class Host:
    env: Env
    tmp: Path
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, argv: list[str]) -> tuple[int, int]:
        """(the process started, the pid it printed as ready)."""
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        assert p.stdout is not None
        ready, pid = p.stdout.readline().split()
        assert ready == "ready"
        time.sleep(0.05)  # /proc start times count 10 ms ticks: the next step is later
        return p.pid, int(pid)

    def served(self) -> int:
        return int((self.tmp / "server.pid").read_text())


@pytest.fixture
def host(tmp_path: Path, standin_env: Env) -> Iterator[Host]:
    h = Host(standin_env, tmp_path)
    yield h
    for p in h.procs:
        assert p.stdin is not None
        p.stdin.close()  # each ends when its stdin closes (sh: its child does)
    for p in h.procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _listed(doc: dict[str, Any]) -> dict[int, str]:
    return {p["pid"]: p.get("why", "") for p in doc["hosts"][0]["restart_required"]}


def test_only_the_servers_that_hold_the_old_code_are_listed(host: Host) -> None:
    env, tmp = host.env, host.tmp
    py = str(env.python)
    server = tmp / "server.py"
    server.write_text(SERVER)
    sup_py = tmp / "sup.py"
    sup_py.write_text(SUPERVISOR)
    pidfile = tmp / "server.pid"
    sup, _ = host.start([py, "-I", str(sup_py), str(pidfile), py, "-I", str(server)])
    first = host.served()
    sh, beside = host.start(["sh", "-c", f"{py} -I {server}; :"])
    assert beside != sh  # `; :` keeps the shell: a non-Python parent of a server
    other_venv = tmp / "other"
    subprocess.run([envs.HOST_PYTHON, "-m", "venv", "--without-pip", str(other_venv)], check=True)
    shutil.copytree(env.site / "servekit", envs.site_packages(other_venv) / "servekit")
    _, other = host.start([str(other_venv / "bin" / "python"), "-I", str(server)])

    spec = write(tmp, "a.toml", SPEC_A)
    restart = (
        f"old=$(cat {pidfile}); kill -HUP {sup}; "
        f'while [ "$(cat {pidfile})" = "$old" ]; do sleep 0.05; done'
    )
    res = vpatch(
        "rollout", spec, "--python", py, "--level", "static", "--restart", restart,
        "--allow-no-traffic", "--report", tmp / "report.json", "--json",
    )  # fmt: skip
    assert res.code == 0, res.out + res.err
    second = host.served()
    assert second != first
    # After the rollout's restart: the supervisor's new server started after the write, the
    # one it replaced is gone, the supervisor never loaded servekit, the shell is no Python,
    # the other venv's server runs its own copy: only the server beside them is stale.
    listed = _listed(res.doc)
    assert list(listed) == [beside], (listed, {"sup": sup, "first": first, "second": second})
    assert listed[beside] == f"its program {server} imports servekit"

    verify = vpatch("verify", spec, "--python", py, "--level", "static", "--json")
    assert verify.code == 0, verify.out + verify.err
    assert list(_listed(verify.doc)) == [beside]

    _, late = host.start([py, "-I", str(server)])  # after the write: the patched code
    status = vpatch("status", "--python", py, "--json")
    assert list(_listed(status.doc)) == [beside], status.out + status.err
    human = vpatch("status", "--python", py)
    assert f"restart required: pid {beside} " in human.out
    assert f"pid {sup} " not in human.out and f"pid {second} " not in human.out

    # Rollback writes again: every server of the env that imported servekit before it runs
    # the patched code now, the supervisor's new one and the late one too; still never the
    # supervisor, the shell or the other venv's server.
    back = vpatch("rollback", "--python", py, "--json")
    assert back.code == 0, back.out + back.err
    assert sorted(_listed(back.doc)) == sorted([second, beside, late]), (sup, sh, other)
