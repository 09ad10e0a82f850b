"""A real unprivileged owner of a real venv, for the privilege-separation tests.

The test creates the user (tests/support/users.py: a home of its own, removed with it), and the
venv in that home made by the host's own interpreter with `--system-site-packages` (as
servers that take torch from the system have it), the stand-in package installed by real
pip, every entry then the owner's. `plant_pth` gives the owner's site-packages a `.pth` that
records, in a world-writable marker dir, the uid of every interpreter start that ran it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import envs, standin
from tests.support.users import LabUser, lab_user

HOST_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class OwnedEnv(LabUser):
    markers: Path  # 1777: where the owner's .pth records who ran it

    @property
    def venv(self) -> Path:
        return self.home / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def site(self) -> Path:
        return envs.site_packages(self.venv)

    @property
    def state(self) -> Path:
        return self.venv / ".vpatch"

    def as_owner(self, *argv: str | Path, **kw: Any) -> subprocess.CompletedProcess[bytes]:
        return self.run(*argv, **kw)

    def write_as_owner(self, path: Path, data: bytes) -> None:
        """`path` the owner's file with these bytes (written through the owner's own
        permissions where the test machine's path is one it can reach)."""
        try:
            tmp = self.markers / ("put-" + secrets.token_hex(4))
            tmp.write_bytes(data)
            os.chmod(tmp, 0o644)
            self.as_owner("cp", tmp, path)
            tmp.unlink()
        except subprocess.CalledProcessError:  # a lab host's tree, only reachable as root
            path.write_bytes(data)
            os.lchown(path, self.uid, self.gid)

    def ran_as(self, markers: Path | None = None) -> set[int]:
        """The uids the planted .pth ran as so far."""
        return {int(p.name.split("-")[2]) for p in (markers or self.markers).glob("ran-as-*")}

    def plant_sha2(self) -> None:
        """A `_sha2` module in the owner's site-packages (CPython 3.12+ has one of its own;
        the agent's `from _sha2 import sha256` on 3.11 and older fell through to it), that
        records who imported it and then serves hashlib's sha256."""
        where = repr(str(self.markers))
        code = (
            f"import os; open(os.path.join({where}, 'ran-as-%d-%d' % (os.geteuid(), os.getpid())),"
            " 'w').close()\nfrom hashlib import sha256\n"
        )
        self.write_as_owner(self.site / "_sha2.py", code.encode())

    def give(self, tree: Path) -> None:
        """Every entry of `tree` the owner's (its venv on a lab host)."""
        for p in [tree, *tree.rglob("*")]:
            os.lchown(p, self.uid, self.gid)

    def plant_pth(self, site: Path | None = None, markers: str | None = None) -> None:
        """The .pth in `site` (default: the owner's venv), recording under `markers` (the
        marker dir as the host running the interpreter sees it)."""
        where = repr(markers or str(self.markers))
        code = (
            f"import os; open(os.path.join({where}, 'ran-as-%d-%d' % (os.geteuid(), os.getpid())),"
            " 'w').close()\n"
        )
        self.write_as_owner((site or self.site) / "zz_owner_marker.pth", code.encode())


def base_site_dir() -> Path:
    """The base interpreter's first site dir (where a --system-site-packages venv also reads,
    root's): e.g. /usr/local/lib/python3.11/dist-packages."""
    out = subprocess.run(
        [HOST_PYTHON, "-I", "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


@contextmanager
def owned_env(wheel_dir: Path) -> Iterator[OwnedEnv]:
    """A fresh user owning a venv (with the stand-in installed) in its home; both removed."""
    with lab_user("vpo", home=True) as u, _markers(u.name) as markers:
        env = OwnedEnv(u.name, u.uid, u.gid, u.home, markers)
        subprocess.run(
            [HOST_PYTHON, "-m", "venv", "--without-pip", "--system-site-packages", str(env.venv)],
            check=True,
            capture_output=True,
        )
        whl = standin.build_wheel(wheel_dir)
        pip = [sys.executable, "-m", "pip", "-q", "--python", str(env.python)]
        subprocess.run(
            [*pip, "install", "--no-deps", "--no-index", str(whl)], check=True, capture_output=True
        )
        env.give(env.venv)
        yield env


@contextmanager
def _markers(name: str) -> Iterator[Path]:
    """/tmp/vpatch-markers-NAME, mode 1777: where code the tests plant records the uid of every
    interpreter that ran it; removed afterwards."""
    markers = Path(f"/tmp/vpatch-markers-{name}")
    markers.mkdir(mode=0o777)
    try:
        os.chmod(markers, 0o1777)
        yield markers
    finally:
        shutil.rmtree(markers, ignore_errors=True)


def evil_apply(path: str | Path, before: str | None, after: str | None) -> dict[str, object]:
    """A journal `apply` entry an environment's owner writes to make root act on `path`."""
    return {
        "action": "apply",
        "spec": "evil",
        "package": "servekit",
        "file": "x.py",
        "path": str(path),
        "before": before,
        "after": after,
        "edits": [],
    }


@dataclass(frozen=True)
class User(LabUser):
    """A real unprivileged user with a home of its own, and a 1777 marker dir where the code
    the tests plant records the uid of every interpreter that ran it."""

    markers: Path

    def marker_code(self) -> str:
        """One line of Python that records the uid that ran it (as a .pth line or a module)."""
        where = repr(str(self.markers))
        return (
            f"import os; open(os.path.join({where}, 'ran-as-%d-%d' % (os.geteuid(), os.getpid())),"
            " 'w').close()\n"
        )

    def ran_as(self) -> set[int]:
        return {int(p.name.split("-")[2]) for p in self.markers.glob("ran-as-*")}


@contextmanager
def a_user() -> Iterator[User]:
    """A fresh user (home 0755 so others may reach what it owns there), removed with its home
    and markers afterwards (tests/support/users.py)."""
    with lab_user("vpt", home=True) as u, _markers(u.name) as markers:
        yield User(u.name, u.uid, u.gid, u.home, markers)


@contextmanager
def root_venv(*flags: str, python: str = HOST_PYTHON) -> Iterator[Path]:
    """A root-owned venv (`python -m venv --without-pip FLAGS`) in a 0755 directory of its
    own under /tmp, so other users can reach it; removed afterwards."""
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="vpatch-root-env-"))
    try:
        os.chmod(top, 0o755)
        venv = top / "venv"
        subprocess.run(
            [python, "-m", "venv", "--without-pip", *flags, str(venv)],
            check=True,
            capture_output=True,
        )
        yield venv
    finally:
        shutil.rmtree(top, ignore_errors=True)
