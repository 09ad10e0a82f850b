"""The bad-input corpus context (a stand-in env, its fingerprint) and a tree hash: what a
refused input must leave unchanged."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests import envs
from tests.support.standin_specs import REL


@dataclass
class Ctx:
    """What a setup may change: the env (and where it lives), placeholders, teardown steps."""

    tmp: Path
    root: Path
    vars: dict[str, str] = field(default_factory=dict)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    @property
    def site(self) -> Path:
        return envs.site_packages(self.root)

    @property
    def target(self) -> Path:
        return self.site / REL

    def mount(self, *args: str, where: Path) -> None:
        subprocess.run(["mount", *args, str(where)], check=True, capture_output=True)
        self.cleanups.append(lambda: _umount(where))


def tree_hash(root: Path, dir_mtime: bool = True) -> str:
    """Every entry under root: path, type, mode, owner, size, mtime and bytes (or link target).

    Directories count too (a state dir created and left empty is a change), and so do their
    mtimes unless `dir_mtime` is False (a temp file created and removed changes only that)."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            mtime = st.st_mtime_ns if dir_mtime or not stat.S_ISDIR(st.st_mode) else 0
            h.update(f"{rel}\0{st.st_mode}\0{st.st_uid}\0{st.st_gid}\0{mtime}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(p).encode())
            elif stat.S_ISREG(st.st_mode):
                h.update(f"{st.st_size}\0".encode())
                with open(p, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def _umount(where: Path) -> None:
    if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
