"""How the SSH tests reach the lab hosts: the env python on every host, the CLI flags for a
lab, a host file as the test process sees it."""

from __future__ import annotations

from pathlib import Path

from tests import envs
from tests import sshd as harness

PY = "/root/ml-env/bin/python"


def ssh_args(lab: harness.SshLab, *extra: str) -> list[str]:
    return ["--ssh-config", str(lab.ssh_config), "--python", PY, *extra]


def host_file(host: harness.SshHost, rel: str) -> Path:
    return envs.site_packages(host.home / "ml-env") / rel
