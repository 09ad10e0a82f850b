"""The commit's costs that are decisions: which commits call for the restart scan (pure,
agent/commit.py `scan_wanted`), and one directory fsync per directory of a transaction, still
before its commit marker (a real commit in a venv's own interpreter, os.fsync counted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from patcher.agent import commit, fsops
from tests import standin

SITE = "/srv/env/lib/python3.11/site-packages/"


@pytest.mark.parametrize(
    ("changes", "want"),
    [
        ([], False),  # a commit that only journals (relies_on, a retirement)
        ([(SITE + "pkg/mod.py", True)], True),  # a module replaced
        ([(SITE + "pkg/new.py", False)], False),  # a module created: nobody imported it
        ([(SITE + "pkg/new.py", False), (SITE + "pkg/mod.py", True)], True),
        ([(SITE + "pkg/_ext.cpython-311-x86_64-linux-gnu.so", True)], True),
        ([(SITE + "hook.pth", True)], True),  # run by `site` at every start
        ([(SITE + "pkg/data.json", True), (SITE + "pkg/py.typed", True)], False),  # read, not run
        ([(SITE + "pkg/gone.py", True)], True),  # removed (rollback of add_file): it was there
    ],
)
def test_scan_wanted(changes: list[tuple[str, bool]], want: bool) -> None:
    assert commit.scan_wanted(changes) is want


# Run before the agent loads: os.fsync records what it syncs (a directory or not, its
# inode) and how many fault points were reached by then; the list is written at exit.
_COUNTING = (
    "import atexit, json, os, stat\n"
    "SYNCS = []\n"
    "_fsync = os.fsync\n"
    "def _counted(fd):\n"
    "    st = os.fstat(fd)\n"
    "    from vpatch_agent import faults\n"
    "    SYNCS.append([stat.S_ISDIR(st.st_mode), st.st_ino, len(faults.REACHED)])\n"
    "    _fsync(fd)\n"
    "os.fsync = _counted\n"
    "atexit.register(lambda: open(%r, 'w').write(json.dumps(SYNCS)))\n"
)


def _commit_counted(
    python: Path, request: dict[str, object], tmp: Path
) -> tuple[dict[str, Any], list[tuple[bool, int, str]]]:
    """The answer, and per fsync: (a directory?, its inode, the fault point reached last)."""
    out = tmp / "syncs.json"
    res, reached = standin.handle_in(python, request, tmp, _COUNTING % str(out))
    syncs = json.loads(out.read_text())
    return res, [(is_dir, ino, reached[at - 1] if at else "") for is_dir, ino, at in syncs]


def test_one_directory_fsync_per_directory_before_the_marker(tmp_path: Path) -> None:
    """Three files in one package dir, one in another, each with a backup: every file and
    backup is fsync'ed, each of the two package dirs and backups/ exactly once, backups/
    before the journal entries, the package dirs after the last rename and before the marker."""
    python, site = standin.bare_venv(tmp_path / "venv")
    paths = [site / "pkg" / n for n in ("a.py", "b.py", "c.py")] + [site / "other" / "d.py"]
    writes = []
    for i, p in enumerate(paths):
        p.parent.mkdir(exist_ok=True)
        p.write_text(f"x = {i}\n")
        writes.append(
            {
                "path": str(p),
                "expect_sha256": fsops.sha256_bytes(f"x = {i}\n".encode()),
                "text": f"x = {i + 10}\n",
            }
        )
    state = tmp_path / "state"
    res, syncs = _commit_counted(
        python,
        {
            "op": "commit",
            "state_dir": str(state),
            "writes": writes,
            "journal": [{"action": "apply", "path": str(p), "spec": "s"} for p in paths],
        },
        tmp_path,
    )
    assert res["ok"], res
    assert [p.read_text() for p in paths] == [f"x = {i + 10}\n" for i in range(4)]
    inode = {p: p.stat().st_ino for p in (site / "pkg", site / "other", state / "backups")}
    dirs = [(ino, after) for is_dir, ino, after in syncs if is_dir]
    assert sorted(ino for ino, _ in dirs) == sorted(inode.values()), syncs  # each dir once
    assert [after for ino, after in dirs if ino == inode[state / "backups"]] == ["backup.written"]
    assert [after for ino, after in dirs if ino != inode[state / "backups"]] == [
        "write.renamed",  # after the fourth file's rename: every rename is done
        "write.renamed",
    ]
    files = [after for is_dir, _ino, after in syncs if not is_dir]
    # four temp files, four backups, the journal's entries and its marker
    assert len(files) == 10, syncs
    assert files[-1] == "marker.appended" and files[-2] == "journal.appended", syncs
    last_dir = max(i for i, s in enumerate(syncs) if s[0] and s[1] != inode[state / "backups"])
    assert [s[2] for s in syncs[last_dir + 1 :]] == ["marker.appended"], syncs
