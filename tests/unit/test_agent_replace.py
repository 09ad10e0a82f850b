"""The state dir's one whole-file writer (agent/statedir.py `replace_entry`: the compacted
journal, the rollout lease): a real `python -I` child writes new bytes over old ones and is
SIGKILLed at each of its fault points; the entry then holds the old bytes or the new ones,
never a mix nor nothing, and only a kill before the rename leaves a temp file, which the next
sweep removes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from patcher.agent import compact, fsops, statedir
from tests.conftest import REPO

OLD = b'{"old": true}\n' * 64
NEW = b'{"new": "bytes", "longer": true}\n' * 4096  # longer than OLD: a torn write shows

_CHILD = (
    "import os, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from patcher.agent import faults, statedir\n"
    "faults.arm(sys.argv[3])\n"
    "fd = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECTORY)\n"
    "owner = tuple(map(int, sys.argv[4:6])) or None\n"
    "statedir.replace_entry(fd, 'entry', sys.stdin.buffer.read(), owner, points='t')\n"
)


def _replace(where: Path, armed: str, owner: tuple[int, int] | None = None) -> int:
    """Run the writer in a child with fault point `armed` ("" none), giving the new entry to
    `owner` (uid, gid) when root; its exit status."""
    return subprocess.run(
        [sys.executable, "-I", "-c", _CHILD, str(REPO), str(where), armed, *map(str, owner or ())],
        input=NEW,
        cwd="/",
        check=False,
    ).returncode


def _temps(where: Path) -> list[str]:
    return [n for n in os.listdir(where) if n.startswith(fsops.TEMP_PREFIX)]


@pytest.mark.parametrize("step", statedir.REPLACE_STEPS)
def test_a_kill_at_each_step_leaves_the_old_bytes_or_the_new(tmp_path: Path, step: str) -> None:
    entry = tmp_path / "entry"
    entry.write_bytes(OLD)
    assert _replace(tmp_path, "t." + step) == -signal.SIGKILL  # killed right there
    renamed = statedir.REPLACE_STEPS.index(step) >= statedir.REPLACE_STEPS.index("renamed")
    assert entry.read_bytes() == (NEW if renamed else OLD)
    left = _temps(tmp_path)
    assert len(left) == (0 if renamed else 1), left
    if left:  # the whole new bytes, kept apart from the entry until the rename
        assert (tmp_path / left[0]).read_bytes() == NEW
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            swept = fsops.sweep(fd, time.time() + 1, str(tmp_path))
        finally:
            os.close(fd)
        assert swept == [str(tmp_path / left[0])] and _temps(tmp_path) == []


def test_unkilled_it_replaces_the_entry_0600_and_leaves_nothing(tmp_path: Path) -> None:
    entry = tmp_path / "entry"
    entry.write_bytes(OLD)
    os.chmod(entry, 0o644)
    assert _replace(tmp_path, "") == 0
    assert entry.read_bytes() == NEW
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600 and _temps(tmp_path) == []


def test_root_gives_the_new_entry_to_the_owner_it_names(tmp_path: Path) -> None:
    """As the journal it replaces is owned (compaction as root of a user's state dir)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file away")
    (tmp_path / "entry").write_bytes(OLD)
    assert _replace(tmp_path, "", (65534, 65534)) == 0
    st = (tmp_path / "entry").stat()
    assert (st.st_uid, st.st_gid) == (65534, 65534) and (tmp_path / "entry").read_bytes() == NEW
    assert _replace(tmp_path, "") == 0  # no owner named: the writer's own
    assert (tmp_path / "entry").stat().st_uid == 0


def test_a_planted_link_is_replaced_not_followed(tmp_path: Path) -> None:
    """A symlink at the entry's name is replaced by the new file; what it named is untouched."""
    victim = tmp_path / "victim"
    victim.write_bytes(OLD)
    (tmp_path / "entry").symlink_to(victim)
    assert _replace(tmp_path, "") == 0
    assert not (tmp_path / "entry").is_symlink() and (tmp_path / "entry").read_bytes() == NEW
    assert victim.read_bytes() == OLD


def test_compaction_names_the_writers_steps() -> None:
    """compact.POINTS, which the compaction fault test kills at, are the writer's steps."""
    assert compact.POINTS[:4] == tuple("compact." + s for s in statedir.REPLACE_STEPS)
