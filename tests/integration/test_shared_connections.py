"""Shared SSH connections by default (patcher/transports/share.py), on a real sshd: the first
command's master serves the next command (no second handshake, counted as sshd's logins, not
timed); the operator's ssh_config, `--no-share` and an inventory's `share = false` each say no.

Every master a test makes is ended at its end (tests/support/sharing.py), and the lab's own
ssh_config says `ControlMaster no`, so no other test rides a master left behind."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import sshd as harness
from tests.conftest import vpatch
from tests.support import sharing
from tests.support.sshargs import PY, host_file
from tests.support.standin_specs import REL, SPEC_A


@pytest.fixture
def cache_dir() -> Iterator[Path]:
    """A short VPATCH_CACHE_DIR (its cm/ holds the sockets: 108 bytes at most), masters ended."""
    with sharing.cache_dir("vp-share-") as d:
        yield d


def _status(cfg: Path, cache: Path, *extra: str) -> str:
    r = vpatch(
        "status", "--host", "h1", "--ssh-config", cfg, "--python", PY, "--json", "-v", *extra,
        env={"VPATCH_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert r.code == 0, r.err
    assert [h["target"] for h in json.loads(r.out)["hosts"]] == ["h1"]
    return r.err


def test_the_next_command_rides_the_first_ones_master(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory, cache_dir: Path
) -> None:
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    host = lab.hosts[0]
    sharing.log_logins(host)
    cfg = sharing.config_without_sharing_lines(lab, tmp_path)
    before = sharing.logins(host)

    err = _status(cfg, cache_dir)
    assert "h1: ssh: connections shared (ControlMaster auto, ControlPersist 60s" in err
    assert sharing.logins(host) - before == 1
    control = cache_dir / "cm"
    assert stat.S_IMODE(control.stat().st_mode) == 0o700
    assert control.stat().st_uid == os.geteuid()
    assert len(sharing.masters(control)) == 1  # left for the next command, 60 s

    # a second command, and a write: over the master, no new handshake
    spec = tmp_path / "servekit-kimi.toml"
    spec.write_text(SPEC_A)
    pristine = host_file(host, REL).read_bytes()
    r = vpatch(
        "apply", spec, "--host", "h1", "--ssh-config", cfg, "--python", PY, "--json",
        "--level", "static", env={"VPATCH_CACHE_DIR": str(cache_dir)},
    )  # fmt: skip
    assert r.code == 0, r.err
    assert [p["outcome"] for p in json.loads(r.out)["hosts"][0]["patches"]] == ["applied"]
    assert host_file(host, REL).read_bytes() != pristine
    assert sharing.logins(host) - before == 1

    # --no-share: a connection of its own, and no word of sharing but that it is off
    err = _status(cfg, cache_dir, "--no-share")
    assert "h1: ssh: not shared: --no-share / share = false" in err
    assert sharing.logins(host) - before == 2

    # an inventory's share = false, likewise
    inv = tmp_path / "hosts.toml"
    inv.write_text("[defaults]\nshare = false\n\n[[host]]\nname = 'h1'\naddress = 'h1'\n")
    r = vpatch(
        "status", "--inventory", inv, "--ssh-config", cfg, "--python", PY, "--json",
        env={"VPATCH_CACHE_DIR": str(cache_dir)},
    )  # fmt: skip
    assert r.code == 0, r.err
    assert sharing.logins(host) - before == 3

    # the master still serves the default
    _status(cfg, cache_dir)
    assert sharing.logins(host) - before == 3


def test_the_operators_controlmaster_no_wins(
    ssh_lab_factory: harness.LabFactory, cache_dir: Path
) -> None:
    """The lab's ssh_config says `ControlMaster no` / `ControlPath none`: read before vpatch's
    own values, it is kept; every command makes its own connection and no socket is left."""
    lab = ssh_lab_factory(1, harness.standin_env_factory)
    host = lab.hosts[0]
    sharing.log_logins(host)
    before = sharing.logins(host)
    _status(lab.ssh_config, cache_dir)
    _status(lab.ssh_config, cache_dir)
    assert sharing.logins(host) - before == 2
    assert sharing.masters(cache_dir / "cm") == []
