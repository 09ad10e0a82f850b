"""The real-SSH harness itself: if these fail, every SSH test after them means nothing.

Each property checked here is one the vpatch SSH tests rely on without re-checking: hosts are
distinct machines as far as a client can tell (hostname, /root), remote `python3` is never the
machine's pyenv, stop/start and cut connections behave like a real outage, and a non-root user
gets exactly the sudo rights its lab asked for.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import sshd
from tests.sshd import LabFactory, SshHost, SshLab

LOCATE = "import importlib.metadata as m; print(m.distribution('servekit').locate_file(''))"


def _wait_for(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _sleep_pids(host: SshHost) -> list[int]:
    return [p for p in host.session_pids() if sshd._exe(p).endswith("/sleep")]


def test_three_hosts_are_distinct_machines(ssh_lab_factory: LabFactory) -> None:
    lab = ssh_lab_factory(3)
    assert [h.name for h in lab.hosts] == ["h1", "h2", "h3"]
    assert len({h.port for h in lab.hosts}) == 3
    known = lab.known_hosts.read_text().splitlines()
    for h in lab.hosts:
        assert h.address == "127.0.0.1"
        assert h.known_hosts_line in known
        assert h.known_hosts_line.startswith(f"[127.0.0.1]:{h.port} ssh-ed25519 AAAA")
        assert Path(f"/proc/{h.pid}/exe").resolve() == Path(sshd.SSHD)
        r = lab.ssh(h, "hostname")
        assert (r.returncode, r.stdout) == (0, f"{h.name}\n"), r.stderr
        r = lab.ssh(h, "sh", "-c", "echo $HOME; ls -A /root; command -v python3")
        assert r.returncode == 0, r.stderr
        assert r.stdout == "/root\n/usr/bin/python3\n"  # empty home: no pyenv .bashrc
    # The client key is private and the host keys were made for this lab.
    assert lab.client_key.stat().st_mode & 0o777 == 0o600
    assert (lab.hosts[0].dir / "host_key").stat().st_mode & 0o777 == 0o600

    assert lab.ssh("h1", "touch /root/only-on-h1").returncode == 0
    assert (lab.hosts[0].home / "only-on-h1").exists()
    assert lab.ssh("h2", "test -e /root/only-on-h1").returncode == 1
    assert not Path("/root/only-on-h1").exists()  # the machine's /root is untouched


def test_standin_env_is_seen_under_root(ssh_lab_factory: LabFactory) -> None:
    lab = ssh_lab_factory(2, env_factory=sshd.standin_env_factory)
    for h in lab.hosts:
        r = lab.ssh(h, "/root/ml-env/bin/python", "-c", LOCATE)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("/root/ml-env/lib/python3"), r.stdout
        assert os.readlink(h.home / "ml-env" / "bin" / "python3") == "/usr/bin/python3"
    # Each host has its own copy: a write on one is not a write on the other.
    a, b = (h.home / "ml-env" / "pyvenv.cfg" for h in lab.hosts)
    assert a.stat().st_ino != b.stat().st_ino


def test_stop_start(ssh_lab_factory: LabFactory) -> None:
    lab = ssh_lab_factory(2)
    h1, h2 = lab.hosts
    old_pid = h1.pid
    h1.stop()
    _wait_for(lambda: not _alive(old_pid), 10)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((h1.address, h1.port), timeout=2).close()
    r = lab.ssh(h1, "true")
    assert r.returncode == 255 and "refused" in r.stderr
    assert lab.ssh(h2, "true").returncode == 0  # the other host is untouched
    h1.start()
    assert h1.pid != old_pid
    r = lab.ssh(h1, "hostname")  # same port, same host key: known_hosts still valid
    assert (r.returncode, r.stdout) == (0, "h1\n"), r.stderr


def _start_sleep(lab: SshLab, host: SshHost) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        lab.ssh_argv(host, "sleep 30"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(lambda: bool(_sleep_pids(host)))
    return proc


def test_kill_sessions_cuts_connections_but_keeps_listening(ssh_lab_factory: LabFactory) -> None:
    lab = ssh_lab_factory(1)
    (h,) = lab.hosts
    proc = _start_sleep(lab, h)
    sleeper = _sleep_pids(h)[0]
    h.kill_sessions()
    assert proc.wait(timeout=20) == 255  # cut, long before its `sleep 30` would have ended
    _wait_for(lambda: not _alive(sleeper), 10)
    assert h.running and h.session_pids() == []
    assert lab.ssh(h, "hostname").stdout == "h1\n"

    # keep_commands: the connection dies but the command goes on (outcome unknown to the
    # client); it is still ours, so stop() kills it.
    proc = _start_sleep(lab, h)
    sleeper = _sleep_pids(h)[0]
    h.kill_sessions(keep_commands=True)
    assert proc.wait(timeout=5) == 255
    assert _alive(sleeper)
    assert lab.ssh(h, "true").returncode == 0
    h.stop()
    _wait_for(lambda: not _alive(sleeper), 10)


@pytest.mark.parametrize("sudoers", [False, True])
def test_nonroot_user(ssh_lab_factory: LabFactory, sudoers: bool) -> None:
    lab = ssh_lab_factory(
        1, env_factory=sshd.standin_env_factory, user=sshd.NONROOT_USER, sudoers=sudoers
    )
    (h,) = lab.hosts
    r = lab.ssh(h, "id -un; echo $HOME; test -w /root/ml-env || echo ro; ls /root")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{sshd.NONROOT_USER}\n{sshd.NONROOT_HOME}\nro\nml-env\n"
    assert lab.ssh(h, "touch /root/ml-env/x").returncode != 0
    r = lab.ssh(h, "/root/ml-env/bin/python", "-c", LOCATE)
    assert r.stdout.startswith("/root/ml-env/"), r.stderr
    r = lab.ssh(h, "sudo -n true")
    assert (r.returncode == 0) == sudoers, r.stderr
    if sudoers:
        assert r.stderr == ""  # no "unable to resolve host": hN is in the host's /etc/hosts
    if sudoers:
        r = lab.ssh(h, "sudo -n sh -c 'id -un; touch /root/ml-env/x'")
        assert (r.returncode, r.stdout) == (0, "root\n"), r.stderr
    # Nothing machine-wide: the sudo rule only exists inside this lab's hosts.
    assert not list(sshd.SUDOERS_D.glob("vpatch*"))


def test_eight_hosts_come_up_fast(tmp_path: Path) -> None:
    t = time.monotonic()
    lab = sshd.start_lab(8, tmp_path / "lab")
    try:
        elapsed = time.monotonic() - t
        print(f"8 hosts up in {elapsed:.2f} s")
        assert lab.ssh("h8", "hostname").stdout == "h8\n"
        pids = [h.pid for h in lab.hosts]
    finally:
        lab.close()
    assert not tmp_path.joinpath("lab").exists()
    assert not any(_alive(p) for p in pids)


def test_missing_sshd_says_how_to_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sshd, "SSHD", str(tmp_path / "no-sshd"))
    with pytest.raises(sshd.SshdError, match="apt-get install openssh-server"):
        sshd.start_lab(1, tmp_path / "lab")
