"""A controller environment with no pip, as `uv tool install vpatch` or a pipx >= 1.18 venv
leaves one: `python -m venv --without-pip`, vpatch's dependencies made importable from the dev
venv (every top-level entry of its site-packages but pip's, linked into one directory that a
`.pth` file names) and vpatch from this checkout. Nothing is downloaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _dev_site() -> Path:
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"])


def make(dest: Path) -> Path:
    """The no-pip venv at `dest`; returns its python (`import pip` fails there)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    python = dest / "bin" / "python"
    deps = dest / "deps"
    deps.mkdir()
    for entry in sorted(_dev_site().iterdir()):
        name = entry.name.lower()
        if name == "pip" or name.startswith("pip-") or name.endswith(".pth"):
            continue
        os.symlink(entry, deps / entry.name)
    site = next((dest / "lib").glob("python3*/site-packages"))
    (site / "vpatch-deps.pth").write_text(f"{deps}\n{REPO}\n")
    return python


def has_pip(python: Path) -> bool:
    """Whether `python` can import pip (the environment's own or any other)."""
    res = subprocess.run([str(python), "-I", "-c", "import pip"], capture_output=True, check=False)
    return res.returncode == 0


def vpatch_command(python: Path) -> list[str]:
    """The CLI run by that interpreter, as its console script would."""
    return [str(python), "-m", "patcher.cli"]
