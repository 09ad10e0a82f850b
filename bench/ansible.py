"""ansible-core as a contender: its own venv (outside the repo), inventory, config, playbook.

Settings are explicit (an ansible.cfg we write, named by ANSIBLE_CONFIG), so no ~/.ansible.cfg
or /etc/ansible can change the figures, and they are recorded in results.json:
- host key checking ON against the lab's known_hosts, as vpatch and the ssh floor do;
- ansible's default ssh_args (`-C -o ControlMaster=auto -o ControlPersist=60s`): within one run,
  the several ssh calls ansible makes per host share one master connection, as vpatch's calls
  share one connection. Each run gets a fresh control_path_dir and its masters are closed after
  it (outside the clock), so no run starts with a connection left by the previous one;
- pipelining off (ansible's default) for the `ansible` row, on for `ansible-pipelining`;
- the same key exchange as the floor's ssh (curve25519), `gather_facts: false`, forks = hosts.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.timing import Timed, child_env, timed
from tests import envs
from tests import sshd as harness

# Pinned: a new release must not silently change the comparison. Installed with pip's own
# configuration (the user's index settings), into a venv outside the repo.
ANSIBLE_CORE = "ansible-core==2.19.14"
VENV = envs.CACHE / "ansible-venv"
TARGET_PYTHON = "/usr/bin/python3"
DEFAULT_SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=60s"


def ensure_venv() -> Path:
    """The ansible venv (reused when it holds the pinned version); returns ansible-playbook."""
    stamp = VENV / ".vpatch-bench-ready"
    playbook = VENV / "bin" / "ansible-playbook"
    if stamp.exists() and stamp.read_text() == ANSIBLE_CORE and playbook.exists():
        return playbook
    VENV.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "venv", "--clear", "--without-pip", str(VENV)],
        check=True,
        capture_output=True,
    )
    # The dev venv's pip installs into the new venv (`--python`), as tests/standin.py does.
    pip = [sys.executable, "-m", "pip", "-q", "--python", str(VENV / "bin" / "python")]
    res = subprocess.run(
        [*pip, "install", "--disable-pip-version-check", ANSIBLE_CORE],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise RuntimeError(f"pip install {ANSIBLE_CORE} failed:\n{res.stderr[-2000:]}")
    stamp.write_text(ANSIBLE_CORE)
    return playbook


def version() -> str:
    res = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", "import ansible; print(ansible.__version__)"],
        capture_output=True,
        text=True,
    )
    return res.stdout.strip() or "?"


class Ansible:
    """One lab's ansible set-up: inventory per host count, config per pipelining setting."""

    def __init__(
        self, work: Path, lab: harness.SshLab, remote_file: str, default_kex: bool = False
    ) -> None:
        self.work = work
        self.lab = lab
        self.default_kex = default_kex  # OpenSSH's own choice, not the lab's curve25519
        # The port a host is reached on (bench/rttlab.py: its forwarder's, at RTT > 0).
        self.port_of: Callable[[harness.SshHost], int] = lambda h: h.port
        self.playbook_bin = ensure_venv()
        work.mkdir(parents=True, exist_ok=True)
        (work / "local-tmp").mkdir(exist_ok=True)
        self.playbook = work / "edit.json"
        self.playbook.write_text(json.dumps(playbook(remote_file), indent=2))

    def inventory(self, hosts: Sequence[harness.SshHost]) -> Path:
        path = self.work / f"hosts-{len(hosts)}.ini"
        common = " ".join(
            [
                f"-o UserKnownHostsFile={self.lab.known_hosts}",
                "-o GlobalKnownHostsFile=/dev/null",
                "-o IdentitiesOnly=yes",
                "-o IdentityAgent=none",
                *([] if self.default_kex else ["-o KexAlgorithms=curve25519-sha256"]),
            ]
        )
        lines = ["[bench]"]
        lines += [
            f"{h.name} ansible_host={h.address} ansible_port={self.port_of(h)}" for h in hosts
        ]
        lines += [
            "",
            "[bench:vars]",
            "ansible_user=root",
            f"ansible_ssh_private_key_file={self.lab.client_key}",
            f"ansible_ssh_common_args={shlex.quote(common)}",
            f"ansible_python_interpreter={TARGET_PYTHON}",
            "",
        ]
        path.write_text("\n".join(lines))
        return path

    def config(self, pipelining: bool, control_dir: Path) -> Path:
        path = self.work / f"ansible-{'pipelining' if pipelining else 'default'}.cfg"
        path.write_text(
            "\n".join(
                [
                    "[defaults]",
                    "host_key_checking = True",
                    "gathering = explicit",
                    "retry_files_enabled = False",
                    "nocolor = True",
                    f"local_tmp = {self.work / 'local-tmp'}",
                    "",
                    "[ssh_connection]",
                    f"ssh_args = {DEFAULT_SSH_ARGS}",
                    f"control_path_dir = {control_dir}",
                    f"pipelining = {pipelining}",
                    "",
                ]
            )
        )
        return path

    def run(self, hosts: Sequence[harness.SshHost], pipelining: bool) -> Timed:
        inventory = self.inventory(hosts)
        control_dir = Path(tempfile.mkdtemp(prefix="cp-", dir=self.work))
        env = child_env(
            {"ANSIBLE_CONFIG": str(self.config(pipelining, control_dir)), "LC_ALL": "C.UTF-8"}
        )
        try:
            return timed(
                [
                    str(self.playbook_bin),
                    "-i",
                    str(inventory),
                    "-f",
                    str(len(hosts)),
                    str(self.playbook),
                ],
                env=env,
                cwd=str(self.work),
            )
        finally:
            close_masters(control_dir)

    def settings(self) -> dict[str, str]:
        return {
            "ansible-core": version(),
            "module": "ansible.builtin.replace (backup: true)",
            "host_key_checking": "True (lab known_hosts)",
            "ssh_args": DEFAULT_SSH_ARGS + " (ansible's default); fresh control dir per run",
            "pipelining": "False for `ansible`, True for `ansible-pipelining`",
            "forks": "= number of hosts",
            "gather_facts": "false",
            "interpreter": TARGET_PYTHON,
            "kex": "OpenSSH's default (same as the floor)"
            if self.default_kex
            else "curve25519-sha256 (same as the floor)",
        }


def playbook(remote_file: str) -> list[dict[str, object]]:
    """The floor's sed, as ansible.builtin.replace (JSON is YAML: no quoting surprises)."""
    return [
        {
            "name": "add kimi_k2",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "add kimi_k2 to supported",
                    "ansible.builtin.replace": {
                        "path": remote_file,
                        "regexp": r'^( *)"qwen",$',
                        "replace": r'\g<0>\n\g<1>"kimi_k2",',
                        "backup": True,
                    },
                }
            ],
        }
    ]


def close_masters(control_dir: Path) -> None:
    """Ask every ssh master ansible left in `control_dir` to exit (`ssh -O exit`): they are our
    own descendants, and a lingering one would hold an sshd session on a host."""
    for sock in control_dir.iterdir():
        subprocess.run(
            ["ssh", "-S", str(sock), "-O", "exit", "bench-control"],
            capture_output=True,
            timeout=10,
        )
    for leftover in control_dir.iterdir():
        leftover.unlink(missing_ok=True)
    control_dir.rmdir()
