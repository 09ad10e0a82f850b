"""patcher/inventory/owners.py: an inventory, its vars directories and the identities it names
are refused when someone other than this user or root could have written them (the rule of
patcher.specs.catalog.writer_problem), unless the person running vpatch trusts it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patcher.errors import SpecError
from patcher.inventory.targets import load_inventory

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
OTHER = 12345  # a uid no user of the machine has


def _hosts(where: Path, extra: str = "") -> Path:
    inv = where / "hosts.toml"
    inv.write_text(f"[[host]]\nname = 'h1'\naddress = 'h1'\n{extra}")
    return inv


def test_a_world_writable_inventory_is_refused_and_trusted_only_on_request(tmp_path: Path) -> None:
    inv = _hosts(tmp_path)
    inv.chmod(0o646)
    with pytest.raises(SpecError) as got:
        load_inventory(str(inv), {})
    assert got.value.message.startswith(
        f"{inv}: writable by group or others (mode 646: every user); refused"
    )
    assert "--trust-inventory" in got.value.hint
    assert load_inventory(str(inv), {}, trust=True).names() == ["h1"]


def test_a_sticky_roots_directory_like_tmp_holds_an_inventory_an_open_one_does_not(
    tmp_path: Path,
) -> None:
    """In /tmp (root's, mode 1777) others may add files but never rename or remove this
    user's: an inventory written there is read. The same directory without the sticky bit
    lets anyone swap the file: refused, naming the directory."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    inv = _hosts(shared)
    assert load_inventory(str(inv), {}).names() == ["h1"]
    shared.chmod(0o777)
    with pytest.raises(SpecError) as got:
        load_inventory(str(inv), {})
    assert f"its directory {shared} is writable by group or others" in got.value.message


def test_an_identity_the_inventory_names_is_checked_too(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("not a key\n")
    key.chmod(0o600)
    os.chown(key, OTHER, OTHER)
    inv = _hosts(tmp_path, f"identity = '{key}'\n")
    with pytest.raises(SpecError) as got:
        load_inventory(str(inv), {})
    assert got.value.message.startswith(f"{key}: owned by uid {OTHER}, not by you (uid 0)")
    assert f"(the identity {inv} names)" in got.value.message
    # --identity on the command line is the person's own choice: not the inventory's
    os.chown(key, 0, 0)
    assert load_inventory(str(inv), {}).names() == ["h1"]


def test_a_vars_file_deep_in_host_vars_is_checked(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text("h1\n")
    deep = tmp_path / "host_vars" / "h1" / "more"
    deep.mkdir(parents=True)
    (deep / "x.yml").write_text("vpatch_restart: 'true'\n")
    (deep / "x.yml").chmod(0o664)
    with pytest.raises(SpecError) as got:
        load_inventory(str(inv), {})
    assert got.value.message.startswith(f"{deep / 'x.yml'}: writable by group or others")
    (deep / "x.yml").chmod(0o644)
    assert load_inventory(str(inv), {}).names() == ["h1"]


def test_a_link_in_group_vars_is_judged_by_what_it_names(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text("h1\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "all.yml").write_text("{}\n")
    os.chown(elsewhere / "all.yml", OTHER, OTHER)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").symlink_to(elsewhere / "all.yml")
    with pytest.raises(SpecError, match=f"owned by uid {OTHER}"):
        load_inventory(str(inv), {})
