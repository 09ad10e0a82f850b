"""The OpenSSH client as vpatch's SSH transport (transports.openssh), against the real sshd lab.

What only a child `ssh` process can get wrong: a connection cut under a running call, a call
timeout (the ssh process is killed, nothing of ours is left), the remote command failing before
the agent runs (same words as paramiko's), authentication refused, and a whole fleet apply and
rollback. Host keys and hostile names run over both clients in test_ssh.py, test_ssh_config.py
and test_hostile_ssh.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import sshd as harness
from tests.conftest import REPO, vpatch
from tests.support.specs import probe
from tests.support.sshargs import CLIENTS, PY, host_file, ssh_args
from tests.support.standin_specs import REL, SPEC_A, spec_a

VIA = ("--ssh-client", "openssh")


def slow_spec(tmp_path: Path, seconds: int = 60) -> Path:
    """SPEC_A whose probe sleeps on the host: a call that is still running when we strike."""
    spec = tmp_path / "slow.toml"
    sleeps = probe("sleeps", "servekit.config", f"import time; time.sleep({seconds})", timeout=120)
    spec.write_text(spec_a(probes=[sleeps]))
    return spec


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def ssh_clients_of(lab: harness.SshLab) -> list[int]:
    """Live `ssh` client processes started with this lab's config (ours: vpatch's children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            argv = _cmdline(int(entry.name)).split(b"\0")
            if argv[0].endswith(b"ssh") and str(lab.ssh_config).encode() in argv:
                found.append(int(entry.name))
    return found


def test_connection_cut_mid_call_then_status_and_rollback(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    h = lab.hosts[0]
    pristine = host_file(h, REL).read_bytes()
    finished = threading.Event()

    def cut_during_probe() -> None:
        while not finished.wait(0.05):
            if any(b"import importlib,sys" in _cmdline(p) for p in h.session_pids()):
                h.kill_sessions()
                return

    cutter = threading.Thread(target=cut_during_probe)
    cutter.start()
    try:
        res = vpatch("apply", slow_spec(tmp_path), "--host", h.name, *ssh_args(lab, "--json", *VIA))
    finally:
        finished.set()
        cutter.join()
    assert res.code == 1, res.out + res.err
    err = res.doc["hosts"][0]["error"]
    assert "connection lost mid-call" in err and "outcome unknown" in err, err
    assert "vpatch status" in res.doc["hosts"][0]["hint"]
    assert ssh_clients_of(lab) == []

    st = vpatch("status", "--host", h.name, *ssh_args(lab, "--json", *VIA))
    patched = '"kimi_k2",' in host_file(h, REL).read_text()
    assert [p["outcome"] for p in st.doc["hosts"][0]["patches"]] == (["applied"] if patched else [])
    # written, its checks cut with the connection: journaled unverified, a state for a person
    assert st.code == (1 if patched else 0), st.out + st.err
    attention = [a["state"] for a in st.doc["hosts"][0].get("attention") or []]
    assert attention == (["unverified"] if patched else []), st.out
    back = vpatch("rollback", "--host", h.name, *ssh_args(lab, *VIA))
    assert back.code == 0, back.out + back.err
    assert host_file(h, REL).read_bytes() == pristine


def test_call_timeout_kills_the_ssh_client(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    h = lab.hosts[0]
    started = time.monotonic()
    res = vpatch(
        "verify",
        slow_spec(tmp_path),
        "--host",
        h.name,
        *ssh_args(lab, "--timeout", "3", "--json", *VIA),
    )
    assert time.monotonic() - started < 20
    assert res.code == 1, res.out + res.err
    err = res.doc["hosts"][0]["error"]
    assert "timed out after 3s" in err and "outcome unknown" in err, err
    assert ssh_clients_of(lab) == []


def test_remote_command_failures_read_the_same_over_both_clients(
    ssh_lab_factory: harness.LabFactory,
) -> None:
    """A missing interpreter (exit 127) or one that cannot run (126): one host error each, in
    the words the paramiko client has always used."""
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    h = lab.hosts[0]
    (h.home / "noexec").write_text("#!/bin/sh\n")
    (h.home / "noexec").chmod(0o644)
    for python, want in (("/root/nope/bin/python", "not found on the host"), ("/root/noexec", "")):
        errors = {}
        for client in CLIENTS:
            args = ["--ssh-config", str(lab.ssh_config), "--python", python, "--json"]
            res = vpatch("status", "--host", h.name, *args, "--ssh-client", client)
            assert res.code == 1, res.out + res.err
            errors[client] = (res.doc["hosts"][0]["error"], res.doc["hosts"][0]["hint"])
        assert errors["openssh"] == errors["paramiko"], errors
        assert want in errors["openssh"][0] and python in errors["openssh"][0], errors


@pytest.mark.parametrize("client", CLIENTS)
def test_authentication_refused(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory, client: str
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(lab.ssh_config.read_text().replace(str(lab.client_key), str(stranger)))
    res = vpatch(
        "status", "--host", "h1", "--ssh-config", cfg, "--python", PY, "--json",
        "--ssh-client", client,
    )  # fmt: skip
    assert res.code == 1, res.out + res.err
    assert "authentication failed" in res.doc["hosts"][0]["error"], res.doc
    assert "--identity" in res.doc["hosts"][0]["hint"]


def test_fleet_apply_and_rollback_restore_exact_bytes(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(2, harness.standin_env_factory)
    before = {h.name: host_file(h, REL).read_bytes() for h in lab.hosts}
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    hosts = [a for h in lab.hosts for a in ("--host", h.name)]
    res = vpatch("apply", spec, *hosts, *ssh_args(lab, "--level", "static", "--json", *VIA))
    assert res.code == 0, res.out + res.err
    assert [h["patches"][0]["outcome"] for h in res.doc["hosts"]] == ["applied", "applied"]
    for h in lab.hosts:
        assert '"kimi_k2",' in host_file(h, REL).read_text()
    back = vpatch("rollback", *hosts, *ssh_args(lab, "--json", *VIA))
    assert back.code == 0, back.out + back.err
    assert {h.name: host_file(h, REL).read_bytes() for h in lab.hosts} == before
    assert ssh_clients_of(lab) == []


def test_openssh_client_missing(tmp_path: Path) -> None:
    """--ssh-client openssh without `ssh` on PATH: a host error that names the way out
    (auto falls back to paramiko: test_ssh_config.py)."""
    bare = tmp_path / "bin"
    bare.mkdir()
    res = vpatch("status", "--host", "gpu-01", "--json", *VIA, env={"PATH": str(bare)})
    assert res.code == 1, res.out + res.err
    assert "no OpenSSH client" in res.doc["hosts"][0]["error"]
    assert "--ssh-client paramiko" in res.doc["hosts"][0]["hint"]


def test_openssh_module_imports_no_paramiko() -> None:
    """The point of the client: a run over it never pays paramiko's import."""
    code = "import sys, patcher.transports.openssh; sys.exit('paramiko' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_identity_and_known_hosts_paths_are_literal(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory, client: str
) -> None:
    """ssh expands `%` tokens in both and splits known_hosts lists at blanks: such paths still
    name exactly the file given."""
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    h = lab.hosts[0]
    odd = tmp_path / "a dir" / "100%d x"
    odd.mkdir(parents=True)
    key, kh = odd / "key %h", odd / "known hosts %d"
    shutil.copy(lab.client_key, key)
    key.chmod(0o600)
    kh.write_text(h.known_hosts_line + "\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        "\n".join(
            line
            for line in lab.ssh_config.read_text().splitlines()
            if "IdentityFile" not in line and "KnownHostsFile" not in line
        )
    )
    res = vpatch(
        "status", "--host", h.name, "--ssh-config", cfg, "--python", PY, "--json",
        "--identity", key, "--known-hosts", kh, "--ssh-client", client,
    )  # fmt: skip
    assert res.code == 0, res.out + res.err
