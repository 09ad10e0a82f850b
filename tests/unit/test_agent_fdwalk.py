"""fdwalk: the one way the agent opens env paths (descriptor walks, fstat checks, writes inside
the held directory), and the state dir's walk from "/" (statedir.open_dir)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from patcher.agent import confine, fdwalk, fsops, statedir

NOBODY = 65534


def _tree(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "mod.py").write_text("X = 1\n")
    return site


def test_parts_refuse_dot_dot_and_empty_components() -> None:
    assert fdwalk.parts("pkg/mod.py") == ["pkg", "mod.py"]
    for bad in ("pkg/../../etc/x", "../x", "pkg//x", "./x", "pkg/", ""):
        with pytest.raises(fdwalk.Unsafe):
            fdwalk.parts(bad)


def test_walk_refuses_a_link_anywhere_and_reads_only_regular_files(tmp_path: Path) -> None:
    site = _tree(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mod.py").write_text("secret\n")
    (site / "linked").symlink_to(elsewhere)
    (site / "pkg" / "file-link.py").symlink_to(elsewhere / "mod.py")
    os.mkfifo(site / "pkg" / "fifo.py")
    with fdwalk.open_root(str(site)) as top:
        with pytest.raises(fdwalk.Unsafe, match="symlink"):
            fdwalk.reach(top, ["linked", "mod.py"])
        where, name = fdwalk.reach(top, ["pkg", "mod.py"])
        with where:
            assert where.read(name, 100)[0] == b"X = 1\n"
            with pytest.raises(fdwalk.Unsafe, match="symlink"):
                where.read("file-link.py", 100)
            with pytest.raises(fdwalk.Unsafe, match="not a regular file"):
                where.read("fifo.py", 100)  # O_NONBLOCK: refused at once, never waited on
            with pytest.raises(fdwalk.TooBig):
                where.read(name, 3)
        with pytest.raises(fdwalk.Unsafe, match="non-directory"):
            fdwalk.reach(top, ["pkg", "mod.py", "x"])


def test_root_is_walked_from_slash(tmp_path: Path) -> None:
    """A root whose real path went through a link by now is refused (it was real once)."""
    real = _tree(tmp_path / "a")
    moved = tmp_path / "b"
    real.rename(moved)
    real.symlink_to(moved)
    with pytest.raises(fdwalk.Unsafe, match="symlink"):
        fdwalk.open_root(str(real))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs two owners")
def test_a_hard_link_of_someone_elses_file_is_not_read(tmp_path: Path) -> None:
    """A hard link to root's file in a user's package dir (fs.protected_hardlinks = 0) would
    be read (its text sent to the controller) and its mode copied; one of the dir owner's own
    files with more links (uv's hard-linked installs) is read."""
    site = _tree(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    os.chmod(secret, 0o600)
    os.chown(site / "pkg", NOBODY, NOBODY)
    os.link(secret, site / "pkg" / "hard.py")
    os.chown(site / "pkg" / "mod.py", NOBODY, NOBODY)
    os.link(site / "pkg" / "mod.py", tmp_path / "cache-copy")
    with fdwalk.open_root(str(site)) as top, top.walk(["pkg"]) as where:
        with pytest.raises(fdwalk.Unsafe, match="hard links"):
            where.read("hard.py", 100)
        assert where.read("mod.py", 100)[0] == b"X = 1\n"
    why = confine.why_not(str(site / "pkg" / "hard.py"), [str(site)])
    assert "hard links" in why


def test_stage_sets_mode_on_the_descriptor_and_publishes_inside_the_dir(tmp_path: Path) -> None:
    site = _tree(tmp_path)
    with fdwalk.open_root(str(site)) as top, top.walk(["pkg"]) as where:
        item = fsops.stage(where, "new.py", b"Y = 2\n", None)
        try:
            item.publish()
        finally:
            item.discard()
        assert fsops.refresh_bytecode(where, item) == ""
    new = site / "pkg" / "new.py"
    assert new.read_bytes() == b"Y = 2\n" and stat.S_IMODE(new.stat().st_mode) == 0o644
    pyc = Path(fsops.cache_from_source(str(new)))
    assert pyc.is_file()
    assert [p.name for p in (site / "pkg").iterdir() if p.name.startswith(".vpatch-")] == []


def test_a_swapped_temp_file_is_not_published(tmp_path: Path) -> None:
    site = _tree(tmp_path)
    other = tmp_path / "other"
    other.write_text("theirs\n")
    with fdwalk.open_root(str(site)) as top, top.walk(["pkg"]) as where:
        item = fsops.stage(where, "mod.py", b"X = 2\n", where.lstat("mod.py"))
        os.unlink(site / "pkg" / item.tmp)
        os.symlink(other, site / "pkg" / item.tmp)
        with pytest.raises(fdwalk.Unsafe, match="replaced"):
            item.publish()
        item.discard()
    assert (site / "pkg" / "mod.py").read_bytes() == b"X = 1\n"


def test_bytecode_is_not_written_through_a_pycache_link(tmp_path: Path) -> None:
    site = _tree(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (site / "pkg" / "__pycache__").symlink_to(victim)
    with fdwalk.open_root(str(site)) as top, top.walk(["pkg"]) as where:
        item = fsops.stage(where, "mod.py", b"X = 2\n", where.lstat("mod.py"))
        item.publish()
        note = fsops.refresh_bytecode(where, item)
        fsops.drop_bytecode(where, str(site / "pkg" / "mod.py"))
    assert "symlink" in note
    assert list(victim.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs two owners")
def test_state_dir_walk_follows_only_roots_and_its_own_links(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    (home / "link").symlink_to(victim)
    os.lchown(home / "link", NOBODY, NOBODY)
    with pytest.raises(statedir.StateError, match="symlink owned by uid 65534"):
        statedir.open_dir(str(home / "link" / "state"), create=True)
    assert list(victim.iterdir()) == []
    (tmp_path / "mine").symlink_to("victim")  # root's own, relative
    fd = statedir.open_dir(str(tmp_path / "mine" / "a" / "b"), create=True)
    os.close(fd)
    assert stat.S_IMODE((victim / "a").stat().st_mode) == 0o700
    assert (victim / "a" / "b").is_dir()
    with pytest.raises(FileNotFoundError):
        statedir.open_dir(str(tmp_path / "absent" / "x"))


def test_peer_gone_once_the_reader_of_stdout_goes() -> None:
    """peer.gone in a process of its own: False while its stdout pipe has a reader, True
    once the reader has closed it."""
    code = (
        "import sys\n"
        "from patcher.agent import peer\n"
        "sys.stderr.write('%s\\n' % peer.gone()); sys.stderr.flush()\n"
        "sys.stdin.readline()\n"
        "sys.stderr.write('%s\\n' % peer.gone()); sys.stderr.flush()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        assert proc.stderr.readline() == b"False\n"
        proc.stdout.close()
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        assert proc.stderr.readline() == b"True\n"
    finally:
        proc.kill()
        proc.wait()
