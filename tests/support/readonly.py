"""Run a command with an environment bind-mounted read-only over itself, in a private mount
namespace the call creates (`unshare --mount`, as tests/sshd.py does for its hosts): what
`docker run --read-only` or a read-only volume gives a server. Needs root (the suite runs as
root); nothing outside the namespace sees the mount, and it ends with the command."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import REPO, VPATCH, Run

# $0: the directory made read-only; "$@": the command. The `touch` proves the mount holds: a
# command that can still write there is not what this helper promises.
_SCRIPT = (
    'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && '
    '! touch "$0/.vpatch-rw-probe" 2>/dev/null && exec "$@"'
)


def argv(root: Path, command: Sequence[str]) -> list[str]:
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        _SCRIPT,
        str(root),
        *command,
    ]


def run(root: Path, command: Sequence[str], timeout: float = 300) -> Run:
    proc = subprocess.run(
        argv(root, command), capture_output=True, text=True, cwd=REPO, timeout=timeout
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def vpatch(root: Path, *args: str | Path) -> Run:
    """The real CLI, with `root` read-only."""
    return run(root, [*VPATCH, *map(str, args)])
