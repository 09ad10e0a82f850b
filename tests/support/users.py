"""Real users of this machine for the tests that need another uid (a stranger planting files,
an environment's owner, a user whose checkout a .pth names): the one place that runs useradd
and userdel for them.

Why one place: each lab had its own useradd/userdel pair, and the removal is the dangerous
half. Here a user is removed only by the `lab_user` that created it, and only while the name
still has the uid it was created with: a name that was already there (a leftover, a clash, a
fixed name another test made) is used as it is and never deleted, and so is its home. The
sshd harness's `vpatch-test` login user (tests/sshd.py) is the one user kept for good, made
once per machine under a lock; it is not made here.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_EXISTS = 9  # useradd's exit status for a name already in use


@dataclass(frozen=True)
class LabUser:
    name: str
    uid: int
    gid: int
    home: Path  # its passwd home (made only with `lab_user(home=True)`)

    def run(self, *argv: str | Path, **kw: Any) -> subprocess.CompletedProcess[bytes]:
        """argv as this user (its own group, no supplementary groups), failing the test if it
        fails; `kw` go to subprocess.run (input=, cwd=, ...)."""
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            [str(a) for a in argv],
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            check=True,
            capture_output=True,
            **kw,
        )


@contextmanager
def lab_user(prefix: str = "vpt", home: bool = False, name: str | None = None) -> Iterator[LabUser]:
    """A user for the duration of the block: a fresh `PREFIX<hex>` (or `name`), with a home of
    its own (mode 0755, so others may reach what it owns there) when `home`. Created if the
    name is free; removed afterwards only if this created it (see the module docstring)."""
    name = name or prefix + secrets.token_hex(4)
    made = _create(name, home)
    pw = pwd.getpwnam(name)
    user = LabUser(name, pw.pw_uid, pw.pw_gid, Path(pw.pw_dir))
    try:
        if made and home:
            os.chmod(user.home, 0o755)
        yield user
    finally:
        if made:
            _remove(user, home)


def _create(name: str, home: bool) -> bool:
    """useradd `name`: True when this made it, False when the name was already a user."""
    argv = ["useradd", "--create-home" if home else "--no-create-home"]
    done = subprocess.run(
        [*argv, "--shell", "/bin/sh", "--user-group", name], capture_output=True, text=True
    )
    if done.returncode == _EXISTS:
        return False
    if done.returncode != 0:
        raise RuntimeError(f"useradd {name}: exit {done.returncode}: {done.stderr.strip()}")
    return True


def _remove(user: LabUser, home: bool) -> None:
    """userdel the user this made, if the name still is that user (same uid); its home too
    when this made one."""
    try:
        if pwd.getpwnam(user.name).pw_uid != user.uid:
            return  # the name was deleted and taken again meanwhile: not ours any more
    except KeyError:
        return
    subprocess.run(["userdel", *(["--remove"] if home else []), user.name], capture_output=True)
    if home and user.home.is_dir() and user.home.stat().st_uid == user.uid:
        shutil.rmtree(user.home, ignore_errors=True)  # what userdel left (files of others)
