"""The hosts the contenders run against, and resetting them between runs.

One lab of real sshd hosts with the stand-in package (tests/standin.py) serves every host count:
N hosts = h1..hN of it (idle sshds cost nothing), so the same hosts are measured at every size.
The import figure uses its own one-host lab with a real vLLM env (or the stand-in, in --quick).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tests import envs, standin
from tests import sshd as harness

PACKAGE_DIR = standin.PACKAGE  # servekit/
REL = f"{standin.PACKAGE}/config.py"
REMOTE_HOME = Path("/root")
PYTHON = "/root/ml-env/bin/python"
VLLM_VERSION = "0.16.0"
VLLM_MODULE = "vllm.config.speculative"
VLLM_SPEC = Path(__file__).resolve().parent.parent / "patches" / "vllm-eagle3-mla-targets.toml"


def site(host: harness.SshHost) -> Path:
    """The host's site-packages as seen from here (under host.home, its /root)."""
    return envs.site_packages(host.home / "ml-env")


def remote(host: harness.SshHost, local: Path) -> str:
    """What the host calls a path under its home."""
    return str(REMOTE_HOME / local.relative_to(host.home))


@dataclass
class StandinLab:
    lab: harness.SshLab
    pristine: Path  # a copy of servekit/ (source AND pip's .pyc, with their mtimes)

    @property
    def hosts(self) -> list[harness.SshHost]:
        return self.lab.hosts

    def target(self, host: harness.SshHost) -> Path:
        return site(host) / REL

    @property
    def remote_target(self) -> str:
        return remote(self.hosts[0], self.target(self.hosts[0]))

    def reset(self, hosts: Sequence[harness.SshHost]) -> None:
        """Every host back to what pip installed: the package dir (config.py, its .pyc, and
        nothing else: ansible's backup file goes too) and no vpatch state. copytree keeps
        mtimes, so pip's timestamp .pyc stays valid and every apply does the same work."""
        for h in hosts:
            pkg = site(h) / PACKAGE_DIR
            shutil.rmtree(pkg)
            shutil.copytree(self.pristine, pkg)
            shutil.rmtree(h.home / "ml-env" / ".vpatch", ignore_errors=True)

    def pristine_text(self) -> str:
        return (self.pristine / "config.py").read_text()


def start_standin(n: int, root: Path) -> StandinLab:
    lab = harness.start_lab(n, root / "standin", harness.standin_env_factory)
    pristine = root / "pristine-servekit"
    shutil.copytree(site(lab.hosts[0]) / PACKAGE_DIR, pristine)
    return StandinLab(lab, pristine)


def _vllm_env(host: harness.SshHost) -> None:
    envs.clone(VLLM_VERSION, host.home / "ml-env")


def start_import_host(root: Path, kind: str) -> harness.SshLab:
    """One host for the import figure: a real vLLM env ('vllm') or the stand-in ('standin')."""
    factory = _vllm_env if kind == "vllm" else partial(harness.standin_env_factory)
    return harness.start_lab(1, root / f"import-{kind}", factory)


def default_kex(lab: harness.SshLab) -> None:
    """Let OpenSSH clients that read the lab's ssh_config negotiate their own default key
    exchange (post-quantum hybrid on OpenSSH 9.x) instead of the curve25519 the lab forces."""
    lines = lab.ssh_config.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.strip().startswith("KexAlgorithms")]
    if len(kept) == len(lines):
        raise RuntimeError(f"{lab.ssh_config}: no KexAlgorithms line to take out")
    lab.ssh_config.write_text("".join(kept))


def write_inventory(path: Path, hosts: Sequence[harness.SshHost]) -> Path:
    """vpatch's hosts.toml for these hosts (names are the lab's ssh_config aliases)."""
    lines = [f"[defaults]\npython = '{PYTHON}'\n"]
    lines += [f"[[host]]\nname = '{h.name}'\naddress = '{h.name}'\n" for h in hosts]
    path.write_text("\n".join(lines))
    return path
