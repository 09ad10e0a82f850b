"""A real unprivileged user of this machine for a test (useradd; userdel afterwards), and ways
to plant files as that user: what another user on the operator's controller can do."""

from __future__ import annotations

import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Stranger:
    name: str
    uid: int
    gid: int

    def run(self, *argv: str | Path) -> None:
        """argv as this user (no supplementary groups), failing the test if it fails."""
        subprocess.run(
            [str(a) for a in argv],
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            check=True,
            capture_output=True,
        )

    def link(self, target: str | Path, at: Path) -> None:
        self.run("ln", "-s", target, at)

    def write(self, at: Path, text: str) -> None:
        self.run("sh", "-c", 'printf %s "$1" > "$2"', "sh", text, at)


@contextmanager
def stranger() -> Iterator[Stranger]:
    name = "vps" + secrets.token_hex(4)
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/bin/sh", "--user-group", name],
        check=True,
        capture_output=True,
    )
    try:
        pw = pwd.getpwnam(name)
        yield Stranger(name, pw.pw_uid, pw.pw_gid)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@contextmanager
def shared_dir() -> Iterator[Path]:
    """A directory anyone may create entries in, sticky like /tmp (in /tmp: a test's own
    tmp_path is closed to other users); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="vpatch-shared-", dir="/tmp"))
    try:
        path.chmod(0o1777)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
