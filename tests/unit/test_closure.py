"""The trust closure's pure parts (patcher/agent/closure.py): an ACL's bytes, who can write
one path, the decision over all of them, and a .pth file's lines."""

from __future__ import annotations

import os
import stat
import struct
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from patcher.agent import closure
from patcher.agent.closure import ANYONE, GROUP, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ

if TYPE_CHECKING:
    from patcher.agent.closure import Acl, Fact

DIR, FILE, LINK = stat.S_IFDIR | 0o755, stat.S_IFREG | 0o644, stat.S_IFLNK | 0o777


def acl_bytes(*entries: tuple[int, int, int]) -> bytes:
    """The kernel's system.posix_acl_access value (what `setfacl` leaves in the xattr)."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


# `setfacl -m u:1001:rw f` on a root 0644 file: owner rw, named user rw, group r, mask rw
USER_RW = ((USER_OBJ, 6, 0xFFFFFFFF), (USER, 6, 1001), (GROUP_OBJ, 4, 0xFFFFFFFF),
           (MASK, 6, 0xFFFFFFFF), (OTHER, 4, 0xFFFFFFFF))  # fmt: skip


def test_acl_bytes_parse_as_the_kernel_writes_them() -> None:
    assert closure.parse_acl(acl_bytes(*USER_RW)) == USER_RW
    assert closure.parse_acl(b"") is None
    assert closure.parse_acl(struct.pack("<I", 1) + b"\0" * 8) is None  # another version
    assert closure.parse_acl(acl_bytes(*USER_RW)[:-3]) is None  # torn


def f(
    path: str, uid: int, mode: int, gid: int = 0, acl: Acl | None = None, c: bool = False
) -> Fact:
    return (path, uid, gid, mode, acl, c)


@pytest.mark.parametrize(
    ("fact", "who"),
    [
        (f("/opt/env/x.pth", 0, FILE), {("user", 0)}),
        (f("/opt/env/x.pth", 1001, FILE), {("user", 1001)}),  # an owner can always chmod
        (f("/opt/env/x.pth", 0, FILE | 0o664, gid=50), {("user", 0), ("group", 50)}),
        (f("/opt/env/x.pth", 0, FILE | 0o666), {("user", 0), ("group", 0), ANYONE}),
        # the ACL, not the mode bits: 0644-looking (mask rw shows as group rw: 0664) but u:1001:rw
        (f("/opt/x.pth", 0, FILE | 0o664, acl=USER_RW), {("user", 0), ("user", 1001)}),
        # the mask takes write away from the named entries (setfacl -m m::r)
        (
            f("/opt/x.pth", 0, FILE | 0o644, acl=((USER, 6, 1001), (MASK, 4, 0))),
            {("user", 0)},
        ),
        (f("/opt/x", 0, DIR, acl=((GROUP, 7, 77), (MASK, 7, 0))), {("user", 0), ("group", 77)}),
        (f("/opt/x", 0, DIR, acl=((OTHER, 7, 0),)), {("user", 0), ANYONE}),  # no mask: no cap
        (f("/tmp", 0, DIR | 0o1777), {("user", 0)}),  # a sticky parent: entries stay theirs
        (f("/tmp", 0, DIR | 0o1777, c=True), {("user", 0), ("group", 0), ANYONE}),  # read by name
        (f("/opt/env/bin/python", 1001, LINK), {("user", 1001)}),  # a link's mode means nothing
    ],
)
def test_writers(fact: Fact, who: set[tuple[str, int]]) -> None:
    assert closure.writers(fact) == who


ROOT = [f("/", 0, DIR), f("/opt", 0, DIR), f("/opt/env", 0, DIR, c=True)]
MEMBERS = {0: frozenset({0}), 50: frozenset({1001}), 60: frozenset({1001, 1002})}


@pytest.mark.parametrize(
    ("extra", "uid"),
    [
        ([], None),  # root's only: root may run it
        ([f("/opt/env/a.pth", 0, FILE | 0o664)], None),  # root's group: its one member is root
        ([f("/home/u/src", 1001, DIR, c=True)], 1001),  # a .pth's path line: a user's checkout
        ([f("/opt/env/a.pth", 0, FILE, acl=USER_RW)], 1001),  # setfacl -m u:1001:rw
        ([f("/opt/env/a.pth", 0, FILE | 0o664, gid=50)], 1001),  # a group of one user
        ([f("/opt/env/click", 1001, DIR, c=True), f("/home/u", 1001, DIR)], 1001),
    ],
)
def test_one_writer_besides_root_is_who_runs_it(extra: list[Fact], uid: int | None) -> None:
    assert closure.decide([*ROOT, *extra], MEMBERS) == uid


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            [f("/opt/env/click", 1001, DIR), f("/opt/env/six.py", 1002, FILE)],
            "more than one user: uid 1001: /opt/env/click; uid 1002: /opt/env/six.py",
        ),
        ([f("/opt/env/a.pth", 0, FILE | 0o664, gid=60)], "more than one user"),
        ([f("/opt/env/a.pth", 0, FILE | 0o664, gid=70)], "group 70 (its members cannot be told)"),
        ([f("/opt/env/a.pth", 0, FILE | 0o666)], "any user: /opt/env/a.pth"),
        ([f("/tmp/src", 0, DIR | 0o1777, c=True)], "any user: /tmp/src"),  # sticky, on sys.path
    ],
)
def test_more_than_one_writer_is_refused_by_name(extra: list[Fact], said: str) -> None:
    with pytest.raises(closure.Refusal, match="pass --run-as USER") as got:
        closure.decide([*ROOT, *extra], MEMBERS)
    assert said in str(got.value)


def test_run_as_wins_and_a_known_owner_counts() -> None:
    two = [*ROOT, f("/opt/env/click", 1001, DIR), f("/opt/env/six.py", 1002, FILE)]
    assert closure.decide(two, MEMBERS, run_as=1002) == 1002
    assert closure.decide(two, MEMBERS, run_as=0) is None
    # a worker stage 0 dropped to 1001: another writer of what it will run is refused
    assert closure.decide([*ROOT, f("/opt/env/click", 1001, DIR)], MEMBERS, owner=1001) == 1001
    with pytest.raises(closure.Refusal, match="the environment's interpreter; uid 1002"):
        closure.decide([*ROOT, f("/opt/env/six.py", 1002, FILE)], MEMBERS, owner=1001)


def test_pth_lines_as_site_reads_them() -> None:
    text = (
        "# comment\n"
        "\n"
        "/home/u/src\n"
        "../shared  \n"
        "import __editable___demo_1_0_finder; __editable___demo_1_0_finder.install()\n"
        "import os, apport_python_hook as h\n"
        "import\tzz.sub\n"
        "importlib_is_a_path\n"
    )
    paths, mods = closure.pth_lines(text)
    assert paths == ["/home/u/src", "../shared", "importlib_is_a_path"]
    assert mods == ["__editable___demo_1_0_finder", "os", "apport_python_hook", "zz"]


def test_the_kernels_own_acl_bytes_are_read(tmp_path: Path) -> None:
    """What `setfacl` leaves in the xattr parses to the entries it set (closurefacts.fact),
    and a file without one reads as mode bits only."""
    from patcher.agent import closurefacts

    plain, shared = tmp_path / "plain.pth", tmp_path / "shared.pth"
    plain.write_text("")
    shared.write_text("")
    os.chmod(shared, 0o644)
    subprocess.run(["setfacl", "-m", "u:54321:rw,g:54322:r", str(shared)], check=True)
    assert closurefacts.fact(str(plain))[4] is None
    found = closurefacts.fact(str(shared))
    assert found[4] is not None and (USER, 6, 54321) in found[4] and (GROUP, 4, 54322) in found[4]
    assert ("user", 54321) in closure.writers(found)
    assert ("group", 54322) not in closure.writers(found)
    subprocess.run(["setfacl", "-m", "m::r", str(shared)], check=True)  # the mask takes it back
    assert ("user", 54321) not in closure.writers(closurefacts.fact(str(shared)))


def test_an_editable_finders_mapping_is_read_as_data(tmp_path: Path) -> None:
    """setuptools' `__editable___NAME_finder.py` maps its packages to a checkout: those
    paths are in the closure (read from the MAPPING literal, the module never imported)."""
    from patcher.agent import closurefacts

    finder = tmp_path / "__editable___demo_1_0_finder.py"
    finder.write_text(
        "import sys\n"
        "MAPPING: dict[str, str] = {'demo': '/home/u/src/demo', 'x': 'relative'}\n"
        "NAMESPACES: dict[str, list[str]] = {}\n"
        "raise SystemExit('never run')\n"
    )
    assert closurefacts.finder_paths(str(finder)) == ["/home/u/src/demo"]
    finder.write_text("MAPPING = __import__('os').system('id')\n")
    assert closurefacts.finder_paths(str(finder)) == []
