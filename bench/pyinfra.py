"""pyinfra as a contender: the same edit through `files.replace` (sed on the host, with a backup).

pyinfra comes from the `bench` extra (`make bench` installs it into the dev venv, next to
vpatch); it is not a test dependency. Settings are explicit and recorded in results.json:
- the inventory names the lab's ssh_config aliases (h1..hN) and points pyinfra at that
  ssh_config, so host name, port, user, key, known_hosts and StrictHostKeyChecking come from the
  same file the floor's `ssh -F` and vpatch's `--ssh-config` read: host key checking ON;
- no SSH agent, no key search: only the lab's client key, as for the other contenders;
- `--parallel N` (one greenlet per host, pyinfra's own parallelism), `-y` (no prompt);
- `files.replace(backup=True)`: pyinfra greps for the line (a fact), then runs
  `sed -i.TIMESTAMP 's/.../.../' FILE`, which leaves the backup `config.py.TIMESTAMP`.
pyinfra speaks SSH through paramiko, one connection per host for the whole run, and runs no
Python on the hosts (only the shell, grep and sed).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.timing import Timed, child_env, timed
from tests import sshd as harness

# BRE for grep and sed, as pyinfra passes it; pyinfra escapes `&` and `/` in `replace`, so the
# matched line is written back from its groups rather than with sed's `&`.
MATCH = r'^\( *\)"qwen",$'
REPLACE = r'\1"qwen",\n\1"kimi_k2",'


def executable() -> Path | None:
    """pyinfra's console script in the venv this bench runs in (the `bench` extra), or None:
    the test suite's smoke run (tests/integration/test_bench_smoke.py) has only the test
    extra, and then the pyinfra rows are left out rather than failing the run."""
    script = Path(sys.executable).parent / "pyinfra"
    return script if script.exists() else None


def version() -> str:
    res = subprocess.run(
        [sys.executable, "-c", "import pyinfra; print(pyinfra.__version__)"],
        capture_output=True,
        text=True,
    )
    return res.stdout.strip() or "?"


def deploy(remote_file: str) -> str:
    """The deploy file: one operation, values as Python literals (repr), nothing interpolated."""
    return "\n".join(
        [
            "from pyinfra.operations import files",
            "",
            "files.replace(",
            '    name="add kimi_k2 to supported",',
            f"    path={remote_file!r},",
            f"    text={MATCH!r},",
            f"    replace={REPLACE!r},",
            "    backup=True,",
            ")",
            "",
        ]
    )


class Pyinfra:
    """One lab's pyinfra set-up: the deploy file once, an inventory per host count."""

    def __init__(self, work: Path, lab: harness.SshLab, remote_file: str, bin: Path) -> None:
        self.work = work
        self.lab = lab
        self.bin = bin
        work.mkdir(parents=True, exist_ok=True)
        self.deploy = work / "edit.py"
        self.deploy.write_text(deploy(remote_file))

    def inventory(self, hosts: Sequence[harness.SshHost]) -> Path:
        """A group of the lab's aliases with its data: everything else comes from ssh_config."""
        path = self.work / f"inventory_{len(hosts)}.py"
        data = {
            "ssh_config_file": str(self.lab.ssh_config),
            "ssh_allow_agent": False,
            "ssh_look_for_keys": False,
            "ssh_connect_retries": 0,
        }
        names = [h.name for h in hosts]
        path.write_text(f"bench = ({names!r}, {data!r})\n")
        return path

    def run(self, hosts: Sequence[harness.SshHost]) -> Timed:
        argv = [str(self.bin), "-y", "--parallel", str(len(hosts)), str(self.inventory(hosts))]
        argv.append(str(self.deploy))
        # cwd: pyinfra looks for config.py and group_data/ there; ours holds neither.
        return timed(argv, env=child_env({"LC_ALL": "C.UTF-8"}), cwd=str(self.work))

    def settings(self) -> dict[str, str]:
        return {
            "pyinfra": version(),
            "operation": "files.replace (backup=True): grep fact, then sed -i.TIMESTAMP",
            "ssh": "paramiko (pyinfra's connector), the lab's ssh_config: aliases, ports, key, "
            "known_hosts, StrictHostKeyChecking yes; no agent, no key search",
            "parallel": "--parallel = number of hosts",
            "kex": "curve25519-sha256@libssh.org (paramiko's first choice; the floor's too)",
        }
