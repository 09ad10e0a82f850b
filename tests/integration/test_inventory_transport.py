"""A host's own transport (issue 38): an inventory host may say `transport = KIND` (a name in
patcher.transports.KINDS), and that kind reaches it whatever the run's client is; an unknown
name is bad input where it is written. Real sshd hosts on 127.0.0.1 (tests/sshd.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from patcher.transports import KINDS
from tests import sshd as harness
from tests.conftest import REPO, vpatch

PY = "/root/ml-env/bin/python"


def test_each_host_is_reached_by_its_own_transport(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """Two real hosts, one `transport = "paramiko"`, one `transport = "openssh"`, in a run whose
    own client is OpenSSH: both answer, and -v names each host's kind; only the OpenSSH one
    runs an `ssh` command (the paramiko client has none to show)."""
    lab = ssh_lab_factory(2, harness.standin_env_factory)
    a, b = (h.name for h in lab.hosts)
    inv = tmp_path / "hosts.toml"
    inv.write_text(
        f"[defaults]\npython = '{PY}'\n"
        f"[[host]]\nname = '{a}'\naddress = '{a}'\ntransport = 'paramiko'\n"
        f"[[host]]\nname = '{b}'\naddress = '{b}'\ntransport = 'openssh'\n"
    )
    common = ["--inventory", str(inv), "--ssh-config", str(lab.ssh_config)]
    res = vpatch("status", *common, "--ssh-client", "openssh", "-v", "--json")
    assert res.code == 0, res.out + res.err
    assert [h["target"] for h in res.doc["hosts"]] == [a, b]
    assert all(h["ok"] and h["python_path"] == PY for h in res.doc["hosts"]), res.out
    assert [h["transport"] for h in res.doc["hosts"]] == ["paramiko", "openssh"], res.out
    lines = res.err.splitlines()
    assert f"{a}: transport: paramiko" in lines, res.err
    assert f"{b}: transport: openssh" in lines, res.err
    agents = [ln.split(":")[0] for ln in lines if ": agent: " in ln]
    assert agents == [b], res.err


def test_an_unknown_transport_is_bad_input(tmp_path: Path) -> None:
    """Exit 2 before any host is contacted: FILE:LINE:COL, the closest name, one JSON doc."""
    inv = tmp_path / "hosts.toml"
    inv.write_text("[[host]]\nname = 'a'\naddress = '127.0.0.1'\ntransport = 'paramico'\n")
    human = vpatch("status", "--inventory", inv)
    assert human.code == 2 and human.out == "", human.out
    assert human.err.splitlines() == [
        f"error: {inv}:4:1: host[0].transport: unknown transport 'paramico'",
        'hint: did you mean "paramiko"? a transport is one of: ' + ", ".join(KINDS),
    ]
    machine = vpatch("status", "--inventory", inv, "--json")
    assert machine.code == 2
    assert "unknown transport 'paramico'" in machine.doc["error"], machine.out


# vpatch's CLI in an interpreter where the paramiko extra (fabric) is not installed: an import
# of it finds nothing, as in a plain `pipx install vpatch`.
WITHOUT_FABRIC = (
    "import runpy, sys; sys.modules['fabric'] = None; "
    "runpy.run_module('patcher.cli', run_name='__main__')"
)


def test_a_host_whose_client_is_missing_is_bad_input(tmp_path: Path) -> None:
    """A host that names paramiko where the extra is missing: exit 2 naming the host and how
    to add it, before any host is contacted (the run's own client, OpenSSH, is there)."""
    inv = tmp_path / "hosts.toml"
    inv.write_text(
        "[[host]]\nname = 'a'\naddress = '127.0.0.1'\n"
        "[[host]]\nname = 'b'\naddress = '127.0.0.1'\ntransport = 'paramiko'\n"
    )
    argv = [sys.executable, "-c", WITHOUT_FABRIC, "status", "--inventory", str(inv)]
    run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == "", run.stdout + run.stderr
    error, hint = run.stderr.splitlines()
    assert error == "error: host b: transport = 'paramiko': fabric/paramiko is not installed"
    assert hint.startswith("hint: ") and "fabric" in hint, hint
