"""Stand-ins for the system's `diff` (patcher.authoring.sysdiff): a program that fails, hangs,
or answers numbers that are not the texts' changes, for the tests of what vpatch does then."""

from __future__ import annotations

import os
from pathlib import Path


def program(where: Path, body: str) -> str:
    """An executable /bin/sh script at where/diff running `body`; its path."""
    path = where / "diff"
    path.write_text(f"#!/bin/sh\n{body}\n")
    os.chmod(path, 0o755)
    return str(path)


def open_fds() -> set[int]:
    """This process's open descriptors (Linux: /proc/self/fd), to see none is left behind."""
    return {int(name) for name in os.listdir("/proc/self/fd")}
