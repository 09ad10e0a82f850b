"""Shared SSH connections in tests: a lab ssh_config that leaves sharing to vpatch, sshd logins
counted, and the masters a test made ended by the test (never left to the next test)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests import sshd as harness


def config_without_sharing_lines(lab: harness.SshLab, where: Path) -> Path:
    """The lab's ssh_config without its `ControlMaster no` / `ControlPath none`: an operator's
    config that says nothing about sharing, so vpatch's default applies."""
    cfg = where / "ssh_config_default_sharing"
    kept = [
        line
        for line in lab.ssh_config.read_text().splitlines()
        if not line.strip().startswith(("ControlMaster", "ControlPath"))
    ]
    assert len(kept) == len(lab.ssh_config.read_text().splitlines()) - 2
    cfg.write_text("\n".join(kept) + "\n")
    return cfg


def log_logins(host: harness.SshHost) -> None:
    """Restart the host's sshd at LogLevel INFO (same keys, port and env): logins are logged."""
    host.config.write_text(host.config.read_text().replace("LogLevel ERROR", "LogLevel INFO"))
    host.stop()
    host.start()


def logins(host: harness.SshHost) -> int:
    """Authenticated connections so far: one `Accepted publickey` line per handshake."""
    return host.log.read_text(errors="replace").count("Accepted publickey")


def masters(control: Path) -> list[Path]:
    """The control sockets in `control` (vpatch's ControlPath directory)."""
    return sorted(p for p in control.iterdir() if p.is_socket()) if control.is_dir() else []


def end_masters(control: Path) -> None:
    """`ssh -O exit` on every socket in `control`: the masters are asked to end, not killed."""
    for sock in masters(control):
        subprocess.run(
            ["ssh", "-S", str(sock), "-O", "exit", "unused"], capture_output=True, timeout=30
        )


@contextmanager
def cache_dir(prefix: str) -> Iterator[Path]:
    """A short VPATCH_CACHE_DIR under /tmp (its cm/ holds the sockets: 108 bytes at most),
    its masters ended and the directory removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield d
    finally:
        end_masters(d / "cm")
        shutil.rmtree(d, ignore_errors=True)
