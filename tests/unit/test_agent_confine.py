"""The agent's pure-ish helpers for host state it cannot trust, in-process on real files:
confine.why_not (journaled paths), journal.parse (journal lines), fsops.read_regular (bounded
reads), statedir.open_entry (no links, our owners, one link, 0700/0600 whatever the umask).

The end-to-end attacks (root vs. an env owned by `nobody`) are in
tests/integration/test_hostile_state.py.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from patcher.agent import confine, fsops, journal, statedir


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site-packages"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    return root


def test_why_not(site: Path, tmp_path: Path) -> None:
    dirs = [str(site)]
    good = str(site / "pkg" / "mod.py")
    assert confine.why_not(good, dirs) == ""
    assert confine.why_not(str(site / "pkg" / "new.py"), dirs, must_exist=False) == ""
    assert "does not exist" in confine.why_not(str(site / "pkg" / "new.py"), dirs)
    assert "absolute" in confine.why_not("pkg/mod.py", dirs)
    assert "absolute" in confine.why_not(42, dirs)
    assert "normal path" in confine.why_not(str(site) + "/pkg/../pkg/mod.py", dirs)
    assert "outside" in confine.why_not("/etc/passwd", dirs)
    assert "outside" in confine.why_not(str(site) + "-evil/x.py", dirs)  # a prefix, not a dir
    (site / "pkg" / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(site / "pkg" / "fifo")
    assert "not a regular file" in confine.why_not(str(site / "pkg" / "fifo"), dirs)
    assert "not a regular file" in confine.why_not(str(site / "pkg"), dirs)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mod.py").write_text("y = 2\n")
    (site / "linked").symlink_to(outside)
    assert "symlink" in confine.why_not(str(site / "linked" / "mod.py"), dirs)
    (site / "pkg" / "file-link.py").symlink_to(outside / "mod.py")
    assert "symlink" in confine.why_not(str(site / "pkg" / "file-link.py"), dirs)


def test_roots_are_real_site_dirs() -> None:
    found = confine.roots()
    assert found and all(os.path.realpath(d) == d and os.path.isdir(d) for d in found)
    assert set(found) <= set(found.complete())


def test_roots_completed_by_sysconfig_only_when_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path under a sysconfig dir that site does not list is still confined; a path under
    none is refused naming every dir, sysconfig's first (as before)."""
    site, purelib = tmp_path / "site", tmp_path / "purelib"
    for d in (site, purelib):
        (d / "pkg").mkdir(parents=True)
        (d / "pkg" / "m.py").write_text("x = 1\n")
    monkeypatch.setattr(confine, "_SITE", [str(site), None])
    monkeypatch.setattr(confine, "_SYSCONFIG", [str(purelib), None])
    dirs = confine.roots()
    assert dirs == [str(site)]
    assert confine.why_not(str(site / "pkg" / "m.py"), dirs) == ""
    assert confine.why_not(str(purelib / "pkg" / "m.py"), dirs) == ""
    why = confine.why_not(str(tmp_path / "elsewhere.py"), confine.roots())
    assert why.endswith(f"({purelib}, {site})"), why


def test_parse_skips_bad_lines_with_their_numbers() -> None:
    good = {"action": "apply", "path": "/p", "spec": "a", "txn": "t", "before": None}
    lines = [
        json.dumps(good),
        json.dumps({"action": "apply"}),
        "{torn",
        json.dumps({"action": "rollback", "path": "/p", "spec": "a", "after": 1}),
        json.dumps({"action": "explode", "path": "/p"}),
        json.dumps({"action": "commit", "txn": "t"}),
        '{"action": "apply", "pa',  # a torn LAST line: a crash mid-append, not news
    ]
    warnings: list[str] = []
    entries = journal.parse("\n".join(lines).encode(), warnings)
    assert entries == [good, {"action": "commit", "txn": "t"}]
    assert [w.split(" ")[2] for w in warnings] == ["2", "3", "4", "5"], warnings
    state = journal.fold(entries, {"/p": None})
    assert list(state["/p"]["applied"]) == ["a"]


def test_read_regular_is_bounded(tmp_path: Path) -> None:
    big = tmp_path / "big"
    with open(big, "wb") as fh:
        fh.truncate(fsops.MAX_FILE_BYTES + 1)
    with pytest.raises(fsops.TooBig):
        fsops.read_regular(str(big))
    with pytest.raises(OSError, match="not a regular file"):
        fsops.read_regular("/dev/zero")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        fsops.read_regular(str(fifo))  # O_NONBLOCK: no writer, no hang
    (tmp_path / "link").symlink_to(big)
    with pytest.raises(OSError):
        fsops.read_regular(str(tmp_path / "link"))


def test_open_entry_refuses_links_owners_and_hard_links(tmp_path: Path) -> None:
    dfd = os.open(tmp_path, os.O_RDONLY)
    try:
        (tmp_path / "target").write_text("x")
        (tmp_path / "link").symlink_to(tmp_path / "target")
        with pytest.raises(statedir.StateError, match="link is a symlink"):
            statedir.open_entry(dfd, "link", str(tmp_path / "link"), want_dir=False)
        os.link(tmp_path / "target", tmp_path / "hard")
        with pytest.raises(statedir.StateError, match="2 hard links"):
            statedir.open_entry(dfd, "hard", str(tmp_path / "hard"), want_dir=False)
        if os.geteuid() == 0:
            (tmp_path / "theirs").write_text("x")
            os.chown(tmp_path / "theirs", 1, 1)
            with pytest.raises(statedir.StateError, match="owned by uid 1"):
                statedir.open_entry(dfd, "theirs", str(tmp_path / "theirs"), want_dir=False)
        old = os.umask(0o777)
        try:
            fd, made = statedir.open_entry(dfd, "new", str(tmp_path / "new"), True, create=True)
            os.close(fd)
        finally:
            os.umask(old)
        assert made and stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    finally:
        os.close(dfd)


def test_open_state_of_a_missing_or_plain_file(tmp_path: Path) -> None:
    assert statedir.open_state(str(tmp_path / "none")) is None
    (tmp_path / "file").write_text("x")
    assert statedir.open_state(str(tmp_path / "file")) is None  # inspect: unwritable, not hostile
    with pytest.raises(statedir.StateError, match="not a directory"):
        statedir.open_state(str(tmp_path / "file"), create=True)
