"""The agent's stdin/stdout protocol, spoken to a real `python -I -c BOOT` (no host needed).

A session: the bundle line, then one request per line, one answer line each, exit 0 at EOF.
One-shot callers (Ray's run_agent, the Ansible module) send the bundle line and a request
WITHOUT a newline, then EOF, and json.loads the whole stdout: that must keep working.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patcher import agent
from patcher.agent import faults
from patcher.errors import AgentError
from patcher.transports.bundle import BOOT, agent_bundle, decode_answer
from patcher.transports.ray import run_agent
from tests import standin

INSPECT = {"op": "inspect", "packages": {}}


def run(stdin: bytes, python: Path | str = sys.executable) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(python), "-I", "-c", BOOT], input=stdin, capture_output=True, timeout=60
    )


def test_one_shot_request_without_newline() -> None:
    proc = run(agent_bundle() + json.dumps(INSPECT).encode())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith(b"\n") and proc.stdout.count(b"\n") == 1
    res = json.loads(proc.stdout)  # what the Ansible module's caller does with the whole stdout
    assert res["ok"] and res["protocol"] == agent.PROTOCOL and isinstance(res["pid"], int)


def test_ray_run_agent_still_one_shot() -> None:
    payload = agent_bundle() + json.dumps(INSPECT).encode()
    status, out, err = run_agent(sys.executable, BOOT, payload, 60)
    assert status == 0, err
    assert decode_answer("n1", out, err, status)["ok"]


def test_session_lines_blank_and_bad_lines() -> None:
    lines = [
        json.dumps(INSPECT),
        "",  # ignored
        "   ",  # ignored
        "{not json",
        "[1, 2]",
        json.dumps({"op": "nope"}),
        json.dumps(INSPECT),
    ]
    proc = run(agent_bundle() + "\n".join(lines).encode() + b"\n")
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(x) for x in proc.stdout.decode().splitlines()]
    assert [a["ok"] for a in answers] == [True, False, False, False, True]
    assert [a.get("kind") for a in answers[1:4]] == ["protocol"] * 3
    assert "bad request" in answers[1]["error"] and "not a JSON object" in answers[2]["error"]
    assert len({a["pid"] for a in answers}) == 1  # one process answered them all


def test_eof_right_after_the_bundle_is_a_clean_exit() -> None:
    proc = run(agent_bundle())
    assert (proc.returncode, proc.stdout) == (0, b""), proc.stderr


def test_fault_is_per_request(tmp_path: Path) -> None:
    """A fault armed by one request of a session is gone for the next: the commit after an
    inspect that carried `fault: commit.locked` runs to the end in the same process."""
    python, site = standin.bare_venv(tmp_path / "venv")
    target = site / "mod.py"
    target.write_text("x = 1\n")
    commit = {
        "op": "commit",
        "state_dir": str(tmp_path / "state"),
        "writes": [
            {
                "path": str(target),
                "expect_sha256": hashlib.sha256(b"x = 1\n").hexdigest(),
                "text": "x = 2\n",
            }
        ],
        "journal": [{"action": "apply", "path": str(target), "spec": "s"}],
    }
    armed = {**INSPECT, "fault": "commit.locked"}
    proc = run(agent_bundle() + f"{json.dumps(armed)}\n{json.dumps(commit)}\n".encode(), python)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)  # -9: the fault leaked
    first, second = (json.loads(x) for x in proc.stdout.decode().splitlines())
    assert first["ok"] and second["ok"], second
    assert first["pid"] == second["pid"]
    assert target.read_text() == "x = 2\n"


def test_in_process_handle_rearms_per_request() -> None:
    """`handle` itself forgets the previous request's fault and reached points."""
    faults.arm("commit.locked")
    faults.REACHED.append("stale")
    assert agent.handle(dict(INSPECT))["ok"]
    assert faults._ARMED["spec"] == faults.ENV_SPEC == "" and faults.REACHED == []


def test_wait_handles_descriptors_above_1024() -> None:
    """A controller with hundreds of hosts in flight holds more than 1024 descriptors, which
    select() refuses; transport._wait uses poll()."""
    import resource

    from patcher.transports.base import wait

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    r, w = os.pipe()
    high_r, high_w = os.dup2(r, 1500), os.dup2(w, 1501)
    os.close(r)
    os.close(w)

    class Fd:
        def __init__(self, fd: int) -> None:
            self.fd = fd

        def fileno(self) -> int:
            return self.fd

    reader, writer = Fd(high_r), Fd(high_w)
    try:
        assert wait([reader], [writer], 0.01) == ([], [writer])
        os.write(high_w, b"x")
        assert wait([reader], [], 1.0) == ([reader], [])
        os.close(high_w)
        os.read(high_r, 1)
        assert wait([reader], [], 1.0) == ([reader], [])  # EOF counts as readable
    finally:
        os.close(high_r)
        if soft < 2048:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_code_objects_are_used_and_a_python_without_zlib_says_so() -> None:
    """Every module travels zlib-compressed: BOOT loads the code objects (compiling nothing of
    the agent) where zlib imports; where it does not, the agent can load nothing and says so
    in one line (what the controller quotes), no traceback, exit 1."""
    counting = (
        "import builtins, sys\nN = []\n_compile = builtins.compile\n"
        "def _counted(source, name, *a, **k):\n"
        "    N.append(name)\n"
        "    return _compile(source, name, *a, **k)\n"
        "builtins.compile = _counted\n"
    )
    check = (
        "res = vpatch_agent.answer(sys.stdin.readline())\n"
        "print(vpatch_agent.wire.dumps([res['ok'], sorted(set(N))]))\n"
    )
    loader = BOOT.replace("vpatch_agent.main()\n", "")
    proc = subprocess.run(
        [sys.executable, "-I", "-c", counting + loader + check],
        input=agent_bundle() + json.dumps(INSPECT).encode() + b"\n",
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    ok, names = json.loads(proc.stdout)
    assert ok and not [n for n in names if n.startswith("<vpatch_agent")], names
    blocked = "import sys\nsys.modules['zlib'] = None\n"
    proc = subprocess.run(
        [sys.executable, "-I", "-c", blocked + BOOT],
        input=agent_bundle() + json.dumps(INSPECT).encode() + b"\n",
        capture_output=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (1, b"")
    assert proc.stderr == b"vpatch agent: this python has no zlib module\n"
    with pytest.raises(AgentError, match=r"no answer \(vpatch agent: this python has no zlib"):
        decode_answer("h1", proc.stdout, proc.stderr, proc.returncode)
