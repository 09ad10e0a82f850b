"""A call that runs out of time ends, and takes everything it started with it.

`--timeout` is per agent call for every transport (it did nothing locally), and a probe never
outlives its agent: a transport that kills the agent on timeout (local: its process group;
Ray's task and the Ansible module: the agent alone) or a caller that goes away leaves no probe
running. And a probe's output is kept as a bounded tail, however much it prints.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from pathlib import Path

import pytest

from patcher.transports.bundle import BOOT, BOOT0, TRUSTED_PYTHON, agent_bundle
from patcher.transports.ray import run_agent
from tests.conftest import REPO, VPATCH, Env
from tests.support.specs import probe
from tests.support.standin_specs import REL, SPEC_A, spec_a


def sleeper_spec(tmp_path: Path, seconds: int = 60) -> Path:
    spec = tmp_path / "sleepy.toml"
    sleeps = probe("sleeps", "servekit.config", f"import time; time.sleep({seconds})", timeout=120)
    spec.write_text(spec_a(probes=[sleeps]))
    return spec


def processes_of(python: Path) -> list[str]:
    """Command lines of live processes started from `python` (the env's probes and agents)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmd and cmd[0] == str(python).encode() and state != "Z":
            found.append(f"{entry}: {b' '.join(cmd)[:120]!r}")
    return found


def none_left(python: Path, within: float = 5.0) -> list[str]:
    deadline = time.monotonic() + within
    while (left := processes_of(python)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def verify_request() -> bytes:
    req = {
        "op": "verify",
        "checks": [
            {
                "name": "sleeps",
                "module": "servekit.config",
                "code": "import time; time.sleep(60)",
                "timeout": 120,
            }
        ],
    }
    return json.dumps(req).encode()


def test_local_timeout_ends_the_call_and_its_probe(tmp_path: Path, standin_env: Env) -> None:
    started = time.monotonic()
    spec, py = str(sleeper_spec(tmp_path)), str(standin_env.python)
    proc = subprocess.run(
        [*VPATCH, "verify", spec, "--python", py, "--timeout", "3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - started
    assert took < 30, took
    assert "timed out after 3s; outcome unknown" in proc.stdout + proc.stderr, proc.stderr
    assert none_left(standin_env.python) == []


@pytest.mark.parametrize("stage0", [False, True], ids=["direct", "stage0"])
def test_ray_task_timeout_leaves_no_probe(standin_env: Env, stage0: bool) -> None:
    """Ray's node-side function kills the agent at its timeout: its probe used to sleep on,
    orphaned. As root the agent is stage 0's worker: the whole group goes."""
    payload = agent_bundle() + verify_request()
    boot0 = (BOOT0, TRUSTED_PYTHON) if stage0 else ()
    status, _out, err = run_agent(str(standin_env.python), BOOT, payload, 3, *boot0)
    assert status == 124, err
    assert none_left(standin_env.python) == []


def test_agent_whose_caller_is_gone_stops_its_probe(standin_env: Env) -> None:
    """The transport goes away (connection cut, controller killed) while a probe runs: the
    agent stops the probe and exits instead of waiting out the probe's own timeout."""
    agent = subprocess.Popen(
        [str(standin_env.python), "-I", "-c", BOOT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert agent.stdin is not None and agent.stdout is not None
    agent.stdin.write(agent_bundle() + verify_request() + b"\n")
    agent.stdin.flush()
    deadline = time.monotonic() + 30
    while len(processes_of(standin_env.python)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # agent + probe
    assert len(processes_of(standin_env.python)) == 2
    agent.stdout.close()
    agent.stdin.close()
    try:
        agent.wait(timeout=10)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert none_left(standin_env.python) == []


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_probe_output_is_a_bounded_tail(standin_env: Env) -> None:
    """A probe printing 2 GB: the agent (memory-limited to 1 GiB here) kept all of it and died
    of MemoryError; now it keeps the tail, and the last line is the detail."""
    code = (
        "import sys\nb = b'x' * (1 << 20) + b'\\n'\n"
        "for _ in range(2048):\n    sys.stderr.buffer.write(b)\n    sys.stdout.buffer.write(b)\n"
        "raise SystemExit('the last line')\n"
    )
    req = {
        "op": "verify",
        "checks": [{"name": "loud", "module": "servekit.config", "code": code, "timeout": 300}],
    }
    proc = subprocess.run(
        [str(standin_env.python), "-I", "-c", BOOT],
        input=agent_bundle() + json.dumps(req).encode(),
        capture_output=True,
        timeout=300,
        preexec_fn=_limit_memory,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    [check] = json.loads(proc.stdout)["checks"]
    assert not check["ok"] and check["detail"] == "the last line", check


def test_target_file_larger_than_the_cap_is_refused(tmp_path: Path, standin_env: Env) -> None:
    """inspect reads a target file whole (its text travels): one over 8 MiB is refused with a
    clear error, not read."""
    target = standin_env.file(REL)
    with open(target, "a") as fh:
        fh.write("#" + "x" * (9 << 20) + "\n")
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    proc = subprocess.run(
        [*VPATCH, "apply", str(spec), "--python", str(standin_env.python), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
    [patch] = json.loads(proc.stdout)["hosts"][0]["patches"]
    assert "larger than" in patch["message"], patch


def test_answer_line_is_bounded_on_the_controller(tmp_path: Path) -> None:
    """An "interpreter" that answers 300 MB without a newline (a broken or hostile host): the
    controller kept reading it all into memory; now it stops at MAX_ANSWER_BYTES."""
    from patcher.errors import AgentError
    from patcher.transports.pipe import LocalTransport

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nhead -c 300000000 /dev/zero | tr '\\0' x\n")
    fake.chmod(0o755)
    t = LocalTransport(str(fake))
    try:
        t.call({"op": "inspect"}, timeout=120)
    except AgentError as exc:
        assert "larger than 64 MiB" in exc.message, exc.message
    else:
        raise AssertionError("a 300 MB answer was accepted")
    finally:
        t.close()


def test_ansible_module_timeout_leaves_no_probe(tmp_path: Path, standin_env: Env) -> None:
    """The Ansible module kills the agent at its timeout (subprocess.run): its probe used to
    sleep on, orphaned, on the target."""
    from tests.support.ansible_module import run_agent_module

    res = run_agent_module(
        {
            "request": verify_request().decode(),
            "agent": agent_bundle().decode(),
            "boot": BOOT,
            "boot0": BOOT0,
            "python": str(standin_env.python),
            "timeout": 3,
        },
        tmp_path,
    )
    assert res.get("failed") and "timed out after 3s" in res["msg"], res
    assert none_left(standin_env.python) == []
