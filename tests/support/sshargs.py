"""How the SSH tests reach the lab hosts: the env python on every host, the CLI flags (or the
in-process transport's options) for a lab, a host file as the test process sees it."""

from __future__ import annotations

from pathlib import Path

from patcher.transports.ssh import SshOptions
from tests import envs
from tests import sshd as harness

PY = "/root/ml-env/bin/python"
# Both SSH clients vpatch can use (`--ssh-client`): tests of host keys and hostile names run
# over each, the rest over the default (openssh when `ssh` is on PATH, as here).
CLIENTS = ["openssh", "paramiko"]


def ssh_args(lab: harness.SshLab, *extra: str) -> list[str]:
    return ["--ssh-config", str(lab.ssh_config), "--python", PY, *extra]


def host_file(host: harness.SshHost, rel: str) -> Path:
    return envs.site_packages(host.home / "ml-env") / rel


def lab_options(lab: harness.SshLab) -> SshOptions:
    """SshTransport options for the lab's stand-in env, with timeouts a crash test can wait out."""
    return SshOptions(
        python=PY, ssh_config=str(lab.ssh_config), connect_timeout=10, call_timeout=60
    )
