"""Real wheels from the package index in throwaway venvs: pip's own RECORD, pip's upgrades.

Wheels are fetched once with the dev venv's pip (its own index configuration) into the test
cache outside the repo; each venv is built from the hosts' interpreter without pip and filled
by the dev venv's pip (`--python`), exactly as `pip install` would leave a server.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

from tests import envs
from tests.support.specs import write_spec


def wheel(package: str, version: str) -> Path:
    dest = envs.CACHE / "wheels"
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    dest.mkdir(parents=True, exist_ok=True)
    with open(envs.CACHE / ".lock-wheels", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(dest.glob(pattern))
        if not found:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    "-d",
                    str(dest),
                    f"{package}=={version}",
                ],
                check=True,
                capture_output=True,
            )
            found = sorted(dest.glob(pattern))
    if not found:
        raise FileNotFoundError(f"pip downloaded no wheel matching {pattern}")
    return found[0]


def install(python: Path, package: str, version: str) -> None:
    """`pip install --no-deps package==version` into the venv of `python` (an upgrade too)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "-q",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel(package, version)),
        ],
        check=True,
        capture_output=True,
    )


def venv(dest: Path, package: str, version: str) -> Path:
    """A fresh venv with package==version; returns its python."""
    subprocess.run(
        [envs.HOST_PYTHON, "-m", "venv", "--without-pip", str(dest)],
        check=True,
        capture_output=True,
    )
    python = dest / "bin" / "python"
    install(python, package, version)
    return python


def site(python: Path) -> Path:
    """The site-packages of the venv of `python`."""
    return next((python.parent.parent / "lib").glob("python3*/site-packages"))


def spec_file(tmp: Path, name: str, body: str) -> Path:
    """A spec TOML at tmp/<name>.toml (tests/support/specs.py builds the body)."""
    return write_spec(tmp, name, body)
