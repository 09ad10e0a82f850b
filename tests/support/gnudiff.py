"""GNU `diff -u` and `patch` run on texts, for the round-trip tests of vpatch's unified diffs
(patcher.plan.fastdiff writes them, patcher.authoring.udiff reads them). The binaries are the
system's (Debian: diffutils, patch; `make test-deps` installs patch where it is missing)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"GNU {name} is needed (Debian: apt-get install {name}; make test-deps)"
    return path


def diff_u(old: str, new: str) -> str:
    """GNU `diff -u`'s text of old -> new from its first `@@` on (its headers carry the
    temporary files' names and dates); "" when the texts are the same."""
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "old"), Path(tmp, "new")
        a.write_bytes(old.encode())
        b.write_bytes(new.encode())
        done = subprocess.run(
            [_tool("diff"), "-u", str(a), str(b)], capture_output=True, check=False
        )
    assert done.returncode in (0, 1), done.stderr
    return hunks(done.stdout.decode())


def hunks(text: str) -> str:
    """A unified diff's text from its first `@@` line on."""
    at = text.find("\n@@ ")
    return "" if at < 0 else text[at + 1 :]


def patch(old: str, diff: str) -> str:
    """What GNU `patch` makes of `old` with `diff` applied (it must apply exactly: no fuzz,
    no offset); AssertionError with patch's words where it refuses."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out, d = Path(tmp, "old"), Path(tmp, "out"), Path(tmp, "d.diff")
        src.write_bytes(old.encode())
        d.write_bytes(diff.encode())
        done = subprocess.run(
            [_tool("patch"), "--batch", "--fuzz=0", "-o", str(out), str(src), str(d)],
            capture_output=True,
            check=False,
        )
        words = (done.stdout + done.stderr).decode()
        assert done.returncode == 0, words
        assert "offset" not in words and "fuzz" not in words, words
        return out.read_bytes().decode()
