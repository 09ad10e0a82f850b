"""patcher/transports/share.py: the -F file's text, what may be included, what fits a socket,
and the control directory refused when it is not this user's alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patcher.transports import share


def test_config_text_reads_the_operators_config_before_the_sharing() -> None:
    text = share.config_text("/etc/fleet/ssh_config", "/root/.cache/vpatch/cm")
    lines = text.splitlines()
    assert lines[1] == "Include /etc/fleet/ssh_config"
    assert lines[2:] == [
        "Host *",
        "  ControlMaster auto",
        "  ControlPath /root/.cache/vpatch/cm/%C",
        "  ControlPersist 60s",
    ]
    default = share.config_text(None, "/d").splitlines()
    assert default[1:3] == ["Include ~/.ssh/config", "Include /etc/ssh/ssh_config"]


def test_a_control_path_must_fit_a_unix_socket() -> None:
    assert share.fits("/root/.cache/vpatch/cm")
    assert share.fits("/" + "d" * 48)  # 49 + "/" + 40 + 17 = 107
    assert not share.fits("/" + "d" * 49)


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/etc/ssh/fleet config", "has ' '"),
        ("/etc/ssh/fleet*", "has '*'"),
        ("/etc/ssh/fl#eet", "has '#'"),
        ("/etc/ssh/100%h", "has '%'"),
        ("fleet.conf", "not an absolute path"),
    ],
)
def test_paths_an_include_line_cannot_carry(path: str, why: str) -> None:
    assert why in (share.include_problem(path) or "")


def test_include_accepts_a_plain_absolute_path() -> None:
    assert share.include_problem("/etc/ssh/fleet.conf") is None


def test_the_control_dir_is_made_0700(tmp_path: Path) -> None:
    d = tmp_path / "cm"
    assert share.owned_dir(str(d), (os.geteuid(), 0)) is None
    assert d.stat().st_mode & 0o777 == 0o700


def test_a_control_dir_open_to_others_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "cm"
    d.mkdir(mode=0o700)
    d.chmod(0o770)
    assert "not this user's alone" in (share.owned_dir(str(d), (os.geteuid(), 0)) or "")


def test_a_link_in_place_of_the_control_dir_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / "cm").symlink_to(real)
    assert "not a directory of ours" in (share.owned_dir(str(tmp_path / "cm"), (0,)) or "")


def test_a_control_dir_another_user_owns_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("the suite runs as root (it starts sshd hosts): chown needs it")
    d = tmp_path / "cm"
    d.mkdir(mode=0o700)
    os.chown(d, 12345, 12345)
    assert "not this user's alone" in (share.owned_dir(str(d), (0,)) or "")


def test_the_config_file_is_written_once_by_its_content(tmp_path: Path) -> None:
    first = share.write_config(str(tmp_path), "Host *\n")
    ino = os.stat(first).st_ino
    assert share.write_config(str(tmp_path), "Host *\n") == first
    assert os.stat(first).st_ino == ino
    assert Path(first).read_text() == "Host *\n"
    assert share.write_config(str(tmp_path), "Host x\n") != first


def test_old_config_files_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = [share.write_config(str(tmp_path), f"Host h{i}\n") for i in range(5)]
    for i, path in enumerate(made):  # written in order: the mtimes say so
        os.utime(path, ns=(i * 10**9, i * 10**9))
    monkeypatch.setattr(share, "KEEP_CONFIGS", 3)
    share.write_config(str(tmp_path), "Host h5\n")
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert len(kept) == 3
    assert Path(made[0]).name not in kept and Path(made[4]).name in kept


def test_config_files_used_lately_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run started within PRUNE_AFTER may still hand its file to ssh: never pruned."""
    monkeypatch.setattr(share, "KEEP_CONFIGS", 2)
    for i in range(4):
        share.write_config(str(tmp_path), f"Host h{i}\n")
    assert len(list(tmp_path.iterdir())) == 4
