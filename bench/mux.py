"""Connection sharing as an operator's ssh_config can ask for it: the rows `floor-mux` and
`vpatch-apply-mux`.

OpenSSH's ControlMaster/ControlPersist keeps one authenticated connection per host open after a
command (what ansible's default ssh_args do within one run); a later command's `ssh` then opens
a session over it, with no key exchange and no authentication. vpatch's `ssh` children read the
ssh_config as written (tests/integration/test_openssh_mux.py), so an operator who asks for it
gets it. These rows measure the edit over such warm masters, for the floor and for vpatch
alike, with the lab's ssh_config plus connection sharing ahead of it.

What is counted, so the figures compare with the other rows: the controller column adds the
CPU the masters (our own background `ssh` processes, which encrypt every shared session) spent
during the run; the hosts column counts the live sshd connection processes too
(HostCpu.read(live=True)), since the master's sshd outlives the command. The masters' own
handshakes happen before the clock starts (`warm`), and they are closed right after the row's
run (`close`): a master's sshd is a live child of its host's listener, and the other rows
read the hosts' CPU once every session is reaped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests import sshd as harness

_PID = re.compile(r"Master running \(pid=(\d+)\)")


class Mux:
    def __init__(self, lab: harness.SshLab, work: Path) -> None:
        # A short directory: a ControlPath must fit a unix socket's 108 bytes.
        self.control = Path(tempfile.mkdtemp(prefix="vpatch-cm-"))
        self.config = work / "ssh_config_bench_mux"
        self.lab = lab
        self.pids: dict[str, int] = {}

    def _write_config(self) -> None:
        """The lab's ssh_config as it is now (bench/rttlab.py switches its ports), sharing
        ahead of it."""
        self.config.write_text(
            "Host *\n"
            "  ControlMaster auto\n"
            f"  ControlPath {self.control}/%C\n"
            "  ControlPersist 600\n\n" + self.lab.ssh_config.read_text()
        )

    def _ssh(self, host: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-F", str(self.config), "-n", *argv, host, *([] if argv else ["true"])],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def warm(self, hosts: Sequence[harness.SshHost]) -> None:
        """A master for every host (outside the clock): one `ssh h true` each, all at once."""
        self.control.mkdir(mode=0o700, exist_ok=True)  # (close() removed it after a size)
        self._write_config()
        procs = [
            subprocess.Popen(
                ["ssh", "-F", str(self.config), "-n", h.name, "true"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for h in hosts
            if h.name not in self.pids
        ]
        for p in procs:
            _, err = p.communicate(timeout=60)
            if p.returncode != 0:
                raise RuntimeError(f"ssh master: exit {p.returncode}: {err.decode()[-300:]}")
        for h in hosts:
            if h.name not in self.pids:
                found = _PID.search(self._ssh(h.name, "-O", "check").stderr)
                if found is None:
                    raise RuntimeError(f"{h.name}: no ssh master after warming")
                self.pids[h.name] = int(found[1])

    def cpu(self) -> float:
        """CPU seconds the masters have spent so far (user + system)."""
        from bench.hostcpu import process_seconds

        return sum(process_seconds(pid) for pid in self.pids.values())

    def close(self) -> None:
        """`ssh -O exit` for every master: they are ours, asked to end, not killed."""
        for host in list(self.pids):
            self._ssh(host, "-O", "exit")
            del self.pids[host]
        shutil.rmtree(self.control, ignore_errors=True)
