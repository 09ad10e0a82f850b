"""Shared SSH connections trust only what the run trusts (patcher/transports/share.py), on real
sshd hosts with sharing on (the default).

Each test first shows the attack working against the plain mechanism (OpenSSH's own
ControlMaster, or an `ssh -F` in a directory another user can rename), then refused by vpatch:
- a master made by one command is not ridden by a later one whose known hosts lack the host's
  key or name another key: that run is refused exactly as with `--no-share`;
- a cache directory under a directory another user can write is refused with an error that
  names it, before any `ssh` reads a config from there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import sshd as harness
from tests.conftest import Run, vpatch
from tests.support import sharing
from tests.support.sshargs import PY
from tests.support.users import lab_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root is the operator here")


@pytest.fixture
def cache_dir() -> Iterator[Path]:
    """A short VPATCH_CACHE_DIR (its cm/ holds the sockets), masters ended afterwards."""
    with sharing.cache_dir("vp-trust-") as d:
        yield d


def _status(cfg: Path, cache: Path, *extra: str | Path) -> Run:
    return vpatch(
        "status", "--host", "h1", "--ssh-config", cfg, "--python", PY, *extra,
        env={"VPATCH_CACHE_DIR": str(cache)},
    )  # fmt: skip


def _said(r: Run) -> list[str]:
    """What a refused run says of h1: its error and hint lines."""
    return [ln for ln in r.err.splitlines() if ln.startswith(("error:", "hint:", "h1:"))]


def _other_key_line(host: harness.SshHost, where: Path) -> str:
    """A known_hosts line for the host's name and port with a key the host does not have."""
    key = where / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    return host.known_hosts_line.split(" ", 1)[0] + f" {kind} {blob}\n"


def test_a_master_is_not_ridden_by_a_run_that_trusts_other_host_keys(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory, cache_dir: Path
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    host = lab.hosts[0]
    cfg = sharing.config_without_sharing_lines(lab, tmp_path)
    wrong = tmp_path / "known_hosts_other_key"
    wrong.write_text(_other_key_line(host, tmp_path))
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")

    # The plain mechanism: OpenSSH keys a master by host, port and user (%C) only, so a
    # client whose known hosts name another key, or none, rides it without a host-key check.
    plain = Path(tempfile.mkdtemp(prefix="vp-plain-", dir="/tmp"))
    mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={plain}/%C", "-o", "ControlPersist=60"]
    try:
        first = subprocess.run(["ssh", "-F", str(cfg), *mux, "-T", "h1", "true"], timeout=60)
        assert first.returncode == 0
        for kh in (wrong, empty):
            ridden = subprocess.run(
                ["ssh", "-F", str(cfg), *mux, "-o", f"UserKnownHostsFile={kh}", "-T", "h1", "true"],
                capture_output=True,
                timeout=60,
            )
            assert ridden.returncode == 0, ridden.stderr  # the attack works
        alone = subprocess.run(
            ["ssh", "-F", str(cfg), "-o", f"UserKnownHostsFile={wrong}", "-T", "h1", "true"],
            capture_output=True,
            timeout=60,
        )
        assert alone.returncode == 255  # ...where a connection of its own is refused
    finally:
        sharing.end_masters(plain)
        shutil.rmtree(plain, ignore_errors=True)

    # vpatch: the first run leaves a master; the same options ride it (-v says so)
    assert _status(cfg, cache_dir, "--known-hosts", lab.known_hosts).code == 0
    assert len(sharing.masters(cache_dir / "cm")) == 1
    again = _status(cfg, cache_dir, "--known-hosts", lab.known_hosts, "-v")
    assert again.code == 0, again.err
    assert "h1: ssh: reusing the master an earlier command left" in again.err

    # ...a run that trusts another key, or none, is refused exactly as with --no-share
    for kh, words in ((wrong, "HOST KEY CHANGED"), (empty, "unknown host key")):
        shared = _status(cfg, cache_dir, "--known-hosts", kh)
        alone_run = _status(cfg, cache_dir, "--known-hosts", kh, "--no-share")
        assert shared.code == alone_run.code == 1, shared.err
        assert any(words in line for line in _said(shared)), shared.err
        assert _said(shared) == _said(alone_run)
    assert len(sharing.masters(cache_dir / "cm")) == 1  # the refused runs left none

    # a master made with other options is a different one: -v says none is reused
    fresh = _status(cfg, cache_dir, "--known-hosts", lab.known_hosts, "--accept-new-host-key", "-v")
    assert fresh.code == 0, fresh.err
    assert "h1: ssh: no master for this host and trust yet" in fresh.err
    assert len(sharing.masters(cache_dir / "cm")) == 2


def test_a_cache_under_a_directory_another_user_can_write_is_refused(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    cfg = sharing.config_without_sharing_lines(lab, tmp_path)
    marker = tmp_path / "ran_as"
    with lab_user() as user:
        shared = Path(tempfile.mkdtemp(prefix="vp-swap-", dir="/tmp"))
        try:
            os.chown(shared, user.uid, user.gid)  # the other user's directory
            cache = shared / "cache"

            # The plain mechanism: root's `ssh -F <cache>/cm/ssh_config-x`; the user renames
            # the cache away and puts their own in its place, with `Match exec`.
            (cache / "cm").mkdir(parents=True, mode=0o700)
            name = "ssh_config-0123456789abcdef"
            (cache / "cm" / name).write_text(f"Include {cfg}\n")
            planted = f'Match exec "id -u > {marker}"\n'
            user.run("mv", cache, shared / "away")
            user.run("mkdir", "-p", cache / "cm")
            user.run("sh", "-c", f"cat > {cache / 'cm' / name}", input=planted.encode())
            tmp_path.chmod(0o777)  # the planted command may write its marker here
            subprocess.run(["ssh", "-F", str(cache / "cm" / name), "-G", "h1"], capture_output=True)
            assert marker.read_text().strip() == "0"  # the user's command ran as root
            marker.unlink()

            # vpatch refuses the cache, names it and its writer, and starts no ssh from it
            r = _status(cfg, cache)
            assert r.code == 1
            said = _said(r)
            assert said[0].endswith(
                f"h1: connection sharing refused: the cache directory {cache}: {shared} is "
                f"owned by uid {user.uid} ({user.name})"
            ), r.err
            assert said[1].startswith("hint: set VPATCH_CACHE_DIR to a directory only you")
            assert not marker.exists()
            assert _status(cfg, cache, "--no-share").code == 0

            # the same for a directory of root's that every user can write (no sticky bit)
            os.chown(shared, 0, 0)
            shared.chmod(0o777)
            r = _status(cfg, cache)
            assert r.code == 1
            assert f"{shared} is writable by every user (mode 777)" in r.err
            assert not marker.exists()
        finally:
            shutil.rmtree(shared, ignore_errors=True)
