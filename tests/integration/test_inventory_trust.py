"""Inventories are inputs like specs (patcher/inventory/owners.py): an inventory says which
hosts are reached and which commands run for them, so root reads one only when nobody else
could have written it, or when a person says `--trust-inventory`.

Each test first runs the attack with the inventory trusted (what every run did before the
check): a real user created by the test owns (or may write through its group) a hosts.toml, an
INI inventory or its `group_vars/`, with the local transport and a `restart` command that
records its uid; root's `vpatch rollout` ran it as uid 0. Then the same run without the flag
is refused naming the file and its writer, and the command never runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Env, Run, fingerprint, vpatch
from tests.support.standin_specs import SPEC_A
from tests.support.users import LabUser, lab_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root is the operator here")


@pytest.fixture
def user() -> Iterator[LabUser]:
    with lab_user() as u:
        yield u


def _rollout(spec: Path, inventory: Path, *extra: str) -> Run:
    return vpatch(
        "rollout", spec, "--inventory", inventory, "--level", "static", "--allow-no-traffic",
        "--json", *extra,
    )  # fmt: skip


def _setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(spec, the directory the inventory goes in: root's, 0755, the marker's path)."""
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    where = tmp_path / "inv"
    where.mkdir(mode=0o755)
    return spec, where, tmp_path / "restarted-as"


def test_a_hosts_toml_another_user_can_write_is_refused(
    tmp_path: Path, standin_env: Env, user: LabUser
) -> None:
    spec, where, marker = _setup(tmp_path)
    inv = where / "hosts.toml"
    inv.write_text(
        f"[[host]]\nname = 'h1'\naddress = 'h1'\ntransport = 'local'\n"
        f"python = '{standin_env.python}'\nrestart = 'id -u > {marker}'\n"
    )
    os.chown(inv, user.uid, user.gid)

    # the attack, as every run read an inventory before: the user's command ran as root
    trusted = _rollout(spec, inv, "--trust-inventory")
    assert trusted.code == 0, trusted.out + trusted.err
    assert marker.read_text().strip() == "0"
    marker.unlink()
    assert vpatch("rollback", spec, "--python", standin_env.python).code == 0

    # now: refused, naming the file and who can write it; nothing ran, nothing was written
    before = fingerprint(standin_env.root)
    r = _rollout(spec, inv)
    assert r.code == 2, r.out + r.err
    assert f"error: {inv}: owned by uid {user.uid} ({user.name}), not by you (uid 0)" in r.err
    assert "hint: make it yours (or root's)" in r.err and "--trust-inventory" in r.err
    assert not marker.exists()
    assert fingerprint(standin_env.root) == before

    # root's file, but the user's group may write it: the same
    os.chown(inv, 0, user.gid)
    inv.chmod(0o664)
    r = _rollout(spec, inv)
    assert r.code == 2
    assert f"writable by group or others (mode 664: group {user.gid} ({user.name}))" in r.err
    assert not marker.exists()


def test_an_ini_inventorys_group_vars_another_user_owns_are_refused(
    tmp_path: Path, standin_env: Env, user: LabUser
) -> None:
    spec, where, marker = _setup(tmp_path)
    inv = where / "hosts.ini"
    inv.write_text(f"h1 ansible_connection=local ansible_python_interpreter={standin_env.python}\n")
    (where / "group_vars").mkdir(mode=0o755)
    planted = where / "group_vars" / "all"
    planted.write_text(f"vpatch_restart: id -u > {marker}\n")
    os.chown(planted, user.uid, user.gid)

    trusted = _rollout(spec, inv, "--trust-inventory")
    assert trusted.code == 0, trusted.out + trusted.err
    assert marker.read_text().strip() == "0"
    marker.unlink()
    assert vpatch("rollback", spec, "--python", standin_env.python).code == 0

    r = _rollout(spec, inv)
    assert r.code == 2, r.out + r.err
    assert f"error: {planted}: owned by uid {user.uid} ({user.name})" in r.err
    assert not marker.exists()

    # the inventory itself in a directory the user owns: refused too (they could swap it)
    os.chown(planted, 0, 0)
    os.chown(where, user.uid, user.gid)
    r = _rollout(spec, inv)
    assert r.code == 2
    assert f"error: {inv}: its directory {where} is owned by uid {user.uid}" in r.err
    assert not marker.exists()
