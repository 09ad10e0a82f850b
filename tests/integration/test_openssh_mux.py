"""OpenSSH connection sharing (ControlMaster/ControlPersist) when the operator's ssh_config asks
for it: vpatch's `ssh` children read that config as written, so a second command to a host
rides the master connection the first one left (no key exchange, no authentication), and each
command still finishes on its own (nothing of ours waits on the master that outlives it).

Counted on the real sshd: its log at INFO has one `Accepted publickey` line per authenticated
connection, i.e. per handshake."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests import sshd as harness
from tests.conftest import vpatch
from tests.support.sshargs import PY, host_file
from tests.support.standin_specs import REL, SPEC_A


def _logged_connections(host: harness.SshHost) -> int:
    return host.log.read_text(errors="replace").count("Accepted publickey")


def _log_logins(host: harness.SshHost) -> None:
    """Restart the host's sshd at LogLevel INFO (same keys, port and env): logins are logged."""
    host.config.write_text(host.config.read_text().replace("LogLevel ERROR", "LogLevel INFO"))
    host.stop()
    host.start()


def _mux_config(lab: harness.SshLab, control: Path, where: Path) -> Path:
    """The lab's ssh_config with connection sharing asked for ahead of it (ssh takes the
    first value it reads for each option, so these win over the lab's `ControlMaster no`)."""
    cfg = where / "ssh_config_mux"
    cfg.write_text(
        "Host *\n"
        "  ControlMaster auto\n"
        f"  ControlPath {control}/%C\n"
        "  ControlPersist 60\n\n" + lab.ssh_config.read_text()
    )
    return cfg


def _commands(tmp_path: Path, lab: harness.SshLab, cfg: Path) -> list[list[str]]:
    """status, apply, rollback: three commands, each one ssh session to h1; their outcomes."""
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    common = ["--host", "h1", "--ssh-config", str(cfg), "--python", PY, "--json"]
    got = []
    for argv in (["status"], ["apply", str(spec), "--level", "static"], ["rollback", str(spec)]):
        r = vpatch(*argv, *common)
        assert r.code == 0, r.err
        doc = json.loads(r.out)
        got.append([p["outcome"] for h in doc["hosts"] for p in h["patches"]])
    return got


def test_operator_controlmaster_shares_one_connection_across_commands(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    host = lab.hosts[0]
    _log_logins(host)
    pristine = host_file(host, REL).read_bytes()

    # The lab's own config (ControlMaster no): one handshake per command.
    before = _logged_connections(host)
    plain = _commands(tmp_path, lab, lab.ssh_config)
    assert plain == [[], ["applied"], ["rolled_back"]]
    assert _logged_connections(host) - before == 3

    # A socket path must stay under 108 bytes: pytest's tmp_path is too deep for one.
    control = Path(tempfile.mkdtemp(prefix="vpatch-cm-", dir="/tmp"))
    cfg = _mux_config(lab, control, tmp_path)
    before = _logged_connections(host)
    try:
        shared = _commands(tmp_path, lab, cfg)
        assert shared == [[], ["applied"], ["rolled_back"]]
        # one handshake for the three commands: the first one's master served the others
        assert _logged_connections(host) - before == 1
        assert len(list(control.iterdir())) == 1  # the master's socket, left for the next run
    finally:
        subprocess.run(["ssh", "-F", str(cfg), "-O", "exit", "h1"], capture_output=True, timeout=30)
        shutil.rmtree(control, ignore_errors=True)
    assert host_file(host, REL).read_bytes() == pristine


def test_a_controlpath_ssh_cannot_use_is_named_not_a_lost_connection(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """ssh refuses a ControlPath of 108 bytes or more before it connects: nothing ran on the
    host, so the error says what to fix, never "connection lost mid-call; outcome unknown"."""
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    control = tmp_path / ("d" * 110)
    control.mkdir(mode=0o700)
    cfg = _mux_config(lab, control, tmp_path)
    r = vpatch("status", "--host", "h1", "--ssh-config", str(cfg), "--python", PY)
    assert r.code == 1
    assert "h1: ssh's connection sharing failed (ControlPath too long" in r.err
    assert "lost mid-call" not in r.err
    assert "hint: check ControlMaster/ControlPath in the ssh_config" in r.err
