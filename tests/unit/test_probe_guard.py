"""The audit hook a root probe starts with (patcher/agent/closure.py's `GUARD`): every code file
the interpreter opens to run (`.py`, a cached `.pyc` and its source, `.pth`) is refused when a
user other than root could write it or a directory on its way; a root file passes. Run in a
real `python -I -S` child, as the probe runs."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from patcher.agent.closure import GUARD

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the guard is for probes run as root")
OTHER = 12345  # a uid no user of the machine has


def _import(where: Path, name: str = "mod") -> subprocess.CompletedProcess[str]:
    code = GUARD + "import site\nsite.main()\n"
    code += f"sys.path.insert(0, {str(where)!r})\nimport {name}\n"
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def where(tmp_path: Path) -> Path:
    d = tmp_path / "lib"
    d.mkdir(mode=0o755)
    (d / "mod.py").write_text("X = 1\n")
    return d


def test_a_root_module_is_imported(where: Path) -> None:
    assert _import(where).returncode == 0


def test_a_users_module_is_refused(where: Path) -> None:
    os.chown(where / "mod.py", OTHER, OTHER)
    done = _import(where)
    assert done.returncode == 1
    assert f"vpatch: {where / 'mod.py'} is owned by uid {OTHER}; refused" in done.stderr


def test_a_cached_pyc_of_a_users_source_is_refused(where: Path) -> None:
    """The import system opens only the .pyc while it is fresh: its source is checked too."""
    py_compile.compile(str(where / "mod.py"), doraise=True)
    os.chown(where / "mod.py", OTHER, OTHER)
    done = _import(where)
    assert done.returncode == 1 and f"{where / 'mod.py'} is owned by uid {OTHER}" in done.stderr


def test_a_directory_others_can_write_is_refused(where: Path) -> None:
    where.chmod(0o777)
    done = _import(where)
    assert done.returncode == 1 and f"{where} is writable by every user" in done.stderr


def test_an_acl_that_lets_another_user_write_is_refused(where: Path) -> None:
    """With an ACL the group bits are its mask: a root 0644-looking file that `setfacl` lets
    another uid write shows g+w and carries the ACL."""
    mod = where / "mod.py"
    subprocess.run(["setfacl", "-m", f"u:{OTHER}:rw", str(mod)], check=True)
    done = _import(where)
    assert done.returncode == 1
    assert f"{mod} has an ACL whose mask lets others write it" in done.stderr


def _empty_group() -> int:
    """A group of this machine with no member and nobody's primary group (Debian has several:
    staff, src...): its write bit lets nobody write, as the closure's rule reads it."""
    import grp
    import pwd

    primary = {u.pw_gid for u in pwd.getpwall()}
    for g in grp.getgrall():
        if g.gr_gid != 0 and not g.gr_mem and g.gr_gid not in primary:
            return g.gr_gid
    pytest.fail("no group without members on this machine")


def test_a_group_write_bit_counts_only_with_members(where: Path) -> None:
    """As `closure.decide` resolves groups: a group nobody is in writes nothing; a group whose
    members cannot be told (no such group) counts as another user."""
    mod = where / "mod.py"
    mod.chmod(0o664)
    os.chown(mod, 0, _empty_group())
    assert _import(where).returncode == 0
    os.chown(mod, 0, OTHER)
    done = _import(where)
    assert done.returncode == 1
    assert f"{mod} is writable by group {OTHER} (members: ?)" in done.stderr
