"""patcher/safewrite.py: a file the controller writes where others may write is never written
through a link or a name someone planted (real files, a real second user in a sticky shared
directory as in /tmp)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patcher import safewrite
from patcher.errors import UsageError
from patcher.output.report import write_report
from patcher.result import RunResult
from tests.support.stranger import shared_dir, stranger

SECRET = "root's file\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text(SECRET)
    victim.chmod(0o600)
    return victim


def test_write_report_ignores_a_link_at_the_old_predictable_temp_name(tmp_path: Path) -> None:
    """The report used to go through `FILE.tmp-<pid>`, opened with plain open("w"): a link
    planted there was followed and its target truncated."""
    victim = _victim(tmp_path)
    path = tmp_path / "report.json"
    os.symlink(victim, f"{path}.tmp-{os.getpid()}")
    write_report(RunResult("status", True, []), str(path))
    assert victim.read_text() == SECRET
    assert path.is_file() and not path.is_symlink()
    assert '"command": "status"' in path.read_text()


@pytest.mark.parametrize("kind", ["symlink", "dangling", "hardlink", "fifo", "dir"])
def test_a_planted_name_is_refused_and_nothing_is_written(tmp_path: Path, kind: str) -> None:
    victim = _victim(tmp_path)
    path = tmp_path / "out.json"
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    elif kind == "hardlink":
        os.link(victim, path)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    before = sorted(os.listdir(tmp_path))
    for attempt in (safewrite.check, lambda p: safewrite.write(p, "{}")):
        with pytest.raises(safewrite.Refused) as exc:
            attempt(path)
        assert exc.value.exit_code == 2 and "refused" in exc.value.message and exc.value.hint
    assert victim.read_text() == SECRET
    assert sorted(os.listdir(tmp_path)) == before  # no temp file left either
    assert not (tmp_path / "nowhere").exists()


def test_an_own_file_is_replaced_atomically_with_open_s_mode(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")
    old = os.umask(0o022)
    try:
        safewrite.write(path, "new")
    finally:
        os.umask(old)
    assert path.read_text() == "new" and (path.stat().st_mode & 0o777) == 0o644
    safewrite.write(path, b"bytes", mode=0o600)
    assert path.read_bytes() == b"bytes" and (path.stat().st_mode & 0o777) == 0o600


def test_another_users_plants_in_a_shared_dir_are_refused(tmp_path: Path) -> None:
    """Root writes its report into a sticky shared dir where another real user planted the
    name first: as a link to root's file, and as a file of their own."""
    victim = _victim(tmp_path)
    with stranger() as user, shared_dir() as shared:
        user.link(victim, shared / "linked.json")
        user.write(shared / "theirs.json", "theirs")
        for name, why in (("linked.json", "symbolic link"), ("theirs.json", f"uid {user.uid}")):
            with pytest.raises(safewrite.Refused, match=why):
                safewrite.write(shared / name, "{}")
        assert (shared / "theirs.json").read_text() == "theirs"
        safewrite.write(shared / "mine.json", "{}")
        assert (shared / "mine.json").stat().st_uid == 0
    assert victim.read_text() == SECRET


def test_cache_writes_go_through_the_same_door(tmp_path: Path) -> None:
    """The rewrite cache, the fact cache and the wheel store write through safewrite: a link
    planted at an entry's name is a miss (or the store's UnsafeStore), never written through."""
    from patcher.caches import facts, rewrites
    from patcher.wheels import trust

    victim = _victim(tmp_path)
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    for name in ("entry.json", "bucket", "pointer"):
        (d / name).symlink_to(victim)
    rewrites.write_entry(d, "entry.json", {"x": 1}, 10)
    with pytest.raises(OSError, match="symbolic link"):
        facts._write(d, "bucket", b"{}")
    with pytest.raises(trust.UnsafeStore, match="symbolic link"):
        trust.atomic_write(d / "pointer", b"{}")
    assert victim.read_text() == SECRET
    assert sorted(os.listdir(d)) == ["bucket", "entry.json", "pointer"]
    rewrites.write_entry(d, "fresh.json", {"x": 1}, 10)
    assert (d / "fresh.json").read_text() == '{"x": 1}'
    assert (d / "fresh.json").stat().st_mode & 0o777 == 0o600


def test_a_missing_directory_is_refused_by_the_early_check(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot open its directory") as exc:
        safewrite.check(tmp_path / "nowhere" / "r.json")
    assert exc.value.exit_code == 2 and exc.value.hint
