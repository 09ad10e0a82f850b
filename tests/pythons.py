"""Interpreters of other Python versions, for the tests that install vpatch on them.

Looked up where this machine (a developer's or CI's, the same kind) has them: `pythonX.Y` on
PATH, then pyenv's versions (also when pyenv is not on PATH, e.g. under CI's environment), then
uv's managed interpreters, installing one with `uv python install` when uv is there. A version
found nowhere is a failure that says what to install, never a skip: a machine without 3.10 must
not pass the 3.10 test by not running it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def _version_of(python: str) -> str | None:
    """ "3.10" for a working interpreter (a pyenv shim of a version not selected fails)."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _pyenv_candidates(version: str) -> list[str]:
    roots = [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv"), "/root/.pyenv"]
    pyenv = shutil.which("pyenv")
    if pyenv:
        done = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30)
        roots.insert(0, done.stdout.strip())
    found: list[str] = []
    for root in filter(None, roots):
        versions = Path(root) / "versions"
        # newest patch release first: 3.10.13 before 3.10.9
        dirs = sorted(
            versions.glob(f"{version}.*"),
            key=lambda d: [int(p) if p.isdigit() else -1 for p in d.name.split(".")],
            reverse=True,
        )
        found += [str(d / "bin" / f"python{version}") for d in dirs]
    return found


def _uv(version: str) -> str | None:
    """uv's interpreter of `version`, installed first when uv has none yet."""
    uv = shutil.which("uv")
    if uv is None:
        return None
    lookup = [uv, "python", "find", version]
    done = subprocess.run(lookup, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        subprocess.run([uv, "python", "install", version], capture_output=True, timeout=600)
        done = subprocess.run(lookup, capture_output=True, text=True, timeout=60)
    return done.stdout.strip() if done.returncode == 0 else None


def find(version: str) -> str:
    """The path of a working Python `version` ("3.10"); AssertionError saying how to get one."""
    for python in [shutil.which(f"python{version}") or "", *_pyenv_candidates(version)]:
        if python and _version_of(python) == version:
            return python
    python = _uv(version)
    if python and _version_of(python) == version:
        return python
    raise AssertionError(
        f"no Python {version} on this machine (PATH, pyenv, uv): install one, e.g. "
        f"`pyenv install {version}` or `uv python install {version}`"
    )
