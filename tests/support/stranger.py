"""A real unprivileged user of this machine for a test (tests/support/users.py), and ways to
plant files as that user: what another user on the operator's controller can do."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.users import LabUser, lab_user


class Stranger(LabUser):
    """A user with no business in the operator's files: what it plants, it plants as itself."""

    def link(self, target: str | Path, at: Path) -> None:
        self.run("ln", "-s", target, at)

    def write(self, at: Path, text: str) -> None:
        self.run("sh", "-c", 'printf %s "$1" > "$2"', "sh", text, at)


@contextmanager
def stranger() -> Iterator[Stranger]:
    """A fresh user without a home (tests/support/users.py makes and removes it)."""
    with lab_user("vps") as u:
        yield Stranger(u.name, u.uid, u.gid, u.home)


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
