"""Issue 39 item 3: bare `vpatch status` is a monitor. Each state that needs a person exits 1
from a bare `status`, names what to run (stderr `hint:`, `attention` in --json), on a real
venv with the real CLI: an upgrade that took the patch away, a rollout that ended
`attention`, a rollout whose controller was killed mid-way. Fine states exit 0 (the
control: the same host before the event)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests import sshd as harness
from tests import standin
from tests.conftest import REPO, VPATCH, Env, vpatch
from tests.support import specs
from tests.support.standin_specs import KIMI, SPEC_A, spec_a, write


def _bare(env: Env) -> tuple[int, list[str], str]:
    """Bare status: (exit code, the attention states, stderr)."""
    res = vpatch("status", "--python", env.python, "--json")
    states = [a["state"] for h in res.doc["hosts"] for a in h["attention"]]
    return res.code, states, res.err


def test_an_upgrade_past_the_entrys_variant_is_not_a_green_superseded(
    tmp_path: Path, standin_env: Env
) -> None:
    """The entry's variant covers 1.0 only; pip installs 1.1.0 (the code unpatched): bare
    status said `superseded ... status: ok` while the patch was gone."""
    spec = write(tmp_path, "a.toml", spec_a(versions=">=1.0,<1.1"))
    assert vpatch("apply", spec, "--python", standin_env.python, "--level", "static").code == 0
    assert _bare(standin_env)[:2] == (0, [])
    standin.install_venv(standin_env.root, standin.build_wheel(tmp_path, "1.1.0"))
    code, states, err = _bare(standin_env)
    assert (code, states) == (1, ["upgraded"]), err
    assert "hint: `vpatch apply SPEC` patches the new release" in err
    human = vpatch("status", "--python", standin_env.python)
    assert human.code == 1 and "needs attention: upgraded: servekit-kimi" in human.out


def _rollout(env: Env, spec: Path, restart: str, report: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*VPATCH, "rollout", str(spec), "--python", str(env.python), "--level", "static",
         "--restart", restart, "--allow-no-traffic", "--report", str(report)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def test_a_rollout_ended_attention_is_not_ok(tmp_path: Path, standin_env: Env) -> None:
    """The restart fails and so does the restart on the way back: the service may be down.
    Bare status said `status: ok (1 host(s)) []`."""
    spec = write(tmp_path, "a.toml", SPEC_A)
    run = _rollout(standin_env, spec, "false", tmp_path / "report.json")
    out, err = run.communicate(timeout=120)
    assert run.returncode == 1 and "attention" in out + err, out + err
    code, states, err = _bare(standin_env)
    assert (code, states) == (1, ["rollout_attention"]), err
    assert "hint: check the service" in err


def test_a_rollout_whose_controller_was_killed_is_not_ok(tmp_path: Path, standin_env: Env) -> None:
    """SIGKILL while the restart runs (the host's journal has the apply step, no verdict)."""
    spec = write(tmp_path, "a.toml", SPEC_A)
    pidfile = tmp_path / "restart.pid"  # the restart's own session: it outlives the agent
    run = _rollout(standin_env, spec, f"echo $$ > {pidfile}; exec sleep 60", tmp_path / "r.json")
    try:
        for _ in range(1200):  # until the restart step runs (a fact, not a time)
            if pidfile.exists() and pidfile.read_text().strip():
                break
            assert run.poll() is None, run.communicate()
            time.sleep(0.05)
        else:
            raise AssertionError("the rollout never reached its restart")
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # the controller and its agent
        run.communicate()
        if pidfile.exists() and pidfile.read_text().strip():
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)  # the restart it started
    assert '"step": "apply"' in standin_env.journal.read_text()
    code, states, err = _bare(standin_env)
    assert (code, states) == (1, ["rollout_stopped"]), err
    assert "--resume" in err


@pytest.mark.parametrize("then", ["verify", "ensure"])
def test_a_write_whose_checks_never_finished_is_unverified_until_checked(
    tmp_path: Path, standin_env: Env, then: str
) -> None:
    """The controller is killed while the spec's probe runs (as a second Ctrl-C left it): the
    patch is written and nothing verified it; bare status said `applied ... ok`. It is
    `unverified` (exit 1; `apply` says so too) until `vpatch verify ID`, or `vpatch ensure
    SPEC` (a pre-start hook, no --level), runs the checks and they pass."""
    flag, mark = tmp_path / "hold", tmp_path / "probing"
    probe = (
        f'import os, time\nopen("{mark}", "w").close()\n'
        f'while os.path.exists("{flag}"):\n    time.sleep(0.05)\n'
    )
    spec = write(
        tmp_path,
        "a.toml",
        spec_a(probes=[KIMI, specs.probe("held", "servekit", probe)]),
    )
    flag.touch()
    run = subprocess.Popen(
        [*VPATCH, "apply", str(spec), "--python", str(standin_env.python)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        for _ in range(1200):  # until the probe runs (a fact, not a time)
            if mark.exists():
                break
            assert run.poll() is None, run.communicate()
            time.sleep(0.05)
        else:
            raise AssertionError("the probe never ran")
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)  # the controller and its agent
        run.communicate()
        flag.unlink()  # the probe (its own session) ends
    code, states, err = _bare(standin_env)
    assert (code, states) == (1, ["unverified"]), err
    assert "hint: `vpatch verify ID`" in err
    again = vpatch("apply", spec, "--python", standin_env.python, "--json")
    assert again.code == 1 and again.patch()["outcome"] == "already_applied", again.out
    assert [a["state"] for a in again.doc["hosts"][0]["attention"]] == ["unverified"]
    args = ["servekit-kimi"] if then == "verify" else [str(spec)]
    done = vpatch(then, *args, "--python", standin_env.python)
    assert done.code == 0, done.out + done.err
    assert _bare(standin_env)[:2] == (0, [])


def test_over_ssh_only_the_host_that_needs_a_person_fails(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """Two real sshd hosts: h1's rollout ends `attention`, h2 has the patch applied. Bare
    status over both exits 1, with `attention` on h1 only and h2 ok (the control)."""
    lab = ssh_lab_factory(2, harness.standin_env_factory)
    h1, h2 = lab.hosts
    spec = write(tmp_path, "a.toml", SPEC_A)
    ssh = ["--ssh-config", str(lab.ssh_config), "--python", "/root/ml-env/bin/python"]
    report = tmp_path / "r.json"
    out = vpatch("rollout", spec, "--host", h1.name, *ssh, "--level", "static", "--restart",
                 "false", "--allow-no-traffic", "--report", report, "--json")  # fmt: skip
    assert out.code == 1 and out.doc["hosts"][0]["rollout"]["verdict"] == "attention", out.out
    assert vpatch("apply", spec, "--host", h2.name, *ssh, "--level", "static").code == 0
    st = vpatch("status", "--host", h1.name, "--host", h2.name, *ssh, "--json")
    assert st.code == 1, st.out + st.err
    hosts = {h["target"]: h for h in st.doc["hosts"]}
    assert [a["state"] for a in hosts[h1.name]["attention"]] == ["rollout_attention"]
    assert hosts[h2.name]["attention"] == [] and hosts[h2.name]["ok"], hosts[h2.name]
    assert f"error: {h1.name}: " in st.err and "hint: check the service" in st.err
