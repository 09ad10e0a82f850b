"""Prometheus' own `promtool`, to judge what docs/monitoring.md and `--format prometheus` give
Prometheus: `promtool check rules` (the alerting rule) and `promtool check metrics` (the
textfile, as the exposition format's linter reads it).

Installing Debian's `prometheus` package would pull a web UI's worth of dependencies and a
server unit; promtool is one static binary inside it. So the package is fetched with apt's
own client (`apt-get download`, its archive checked against the signed index apt already
has) into the test cache and only `usr/bin/promtool` is unpacked from it, once; nothing is
installed and nothing of it is committed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.envs import CACHE

HOME = CACHE / "promtool"
PROMTOOL = HOME / "promtool"


def promtool() -> Path:
    """The path of promtool, fetched and unpacked on first use."""
    if PROMTOOL.is_file():
        return PROMTOOL
    assert shutil.which("apt-get") and shutil.which("dpkg-deb"), (
        "promtool comes from Debian's prometheus package: apt-get and dpkg-deb are needed"
    )
    HOME.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=HOME) as tmp:
        os.chmod(tmp, 0o755)  # apt's download user (_apt) writes here when it can
        got = subprocess.run(
            ["apt-get", "download", "-q", "prometheus"],
            cwd=tmp, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        debs = sorted(Path(tmp).glob("prometheus_*.deb"))
        assert got.returncode == 0 and debs, f"apt-get download prometheus: {got.stderr[-800:]}"
        tree = Path(tmp) / "x"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(tree)], check=True, timeout=300)
        os.replace(tree / "usr" / "bin" / "promtool", PROMTOOL)  # whole or absent
    return PROMTOOL


def check(kind: str, path: Path | None = None, text: str | None = None) -> tuple[int, str]:
    """`promtool check KIND [PATH]` (`text` on stdin): (exit status, its output)."""
    argv = [str(promtool()), "check", kind, *([str(path)] if path is not None else [])]
    done = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr
