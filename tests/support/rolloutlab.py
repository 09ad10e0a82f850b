"""The rollout lab: real sshd hosts, each serving from its own real vLLM 0.16.0 env under a real
supervisord, with steady load (tests/rollout_server.py, tests/rollout_load.py).

Per host (seen from the host: /root is the host's private home, tests/sshd.py):
    /root/vllm         a hard-link clone of the cached vLLM 0.16.0 env (+ prometheus_client)
    /root/lab/         supervisord.conf, server.py, load.py, `ctl` (supervisorctl), logs
supervisord (supervisor from the package index, in a venv in the test cache) runs two
programs: `vllm` (the server, on the host's own loopback port) and `load`. It is started by
the test through ssh, in the foreground (`-n`), so it lives in the host's session tree and
stops with the host. `ctl restart vllm` is the restart command a rollout runs on the host.

The hosts share the machine's loopback, so each server has its own port and each host's
health and metrics URLs come from the inventory (`health`, `metrics`), as they would for two
servers on one machine.
"""

from __future__ import annotations

import importlib.metadata
import json
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from patcher.serving.model import Counters, parse
from tests import envs, sshd

REPO = Path(__file__).resolve().parent.parent.parent
SUPERVISOR = "4.3.0"
VLLM = "0.16.0"
STREAMS = 4
SERVER_FILE = "vllm/config/speculative.py"
MODEL_FILE = "vllm/model_executor/models/deepseek_v2.py"


def prometheus_client_dir() -> Path:
    """prometheus_client (a vLLM dependency the CPU test base lacks), installed once into the
    cache with pip --target, at the version the controller uses."""
    version = importlib.metadata.version("prometheus_client")
    dest = envs.CACHE / "extras" / f"prometheus_client-{version}"
    if (dest / ".ready").exists():
        return dest
    with envs._cache_lock():
        if not (dest / ".ready").exists():
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
            subprocess.run(
                [*pip, "--target", str(tmp), f"prometheus_client=={version}"], check=True
            )
            shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
            (dest / ".ready").write_text(version)
    return dest


def supervisor_venv() -> Path:
    """A venv with supervisor (pip, through the user's pip configuration), built once."""
    dest = envs.CACHE / "extras" / f"supervisor-{SUPERVISOR}"
    if (dest / ".ready").exists():
        return dest
    with envs._cache_lock():
        if not (dest / ".ready").exists():
            shutil.rmtree(dest, ignore_errors=True)
            subprocess.run([envs.HOST_PYTHON, "-m", "venv", str(dest)], check=True)
            pip = [str(dest / "bin" / "python"), "-m", "pip", "install", "-q"]
            subprocess.run([*pip, f"supervisor=={SUPERVISOR}"], check=True)
            (dest / ".ready").write_text(SUPERVISOR)
    return dest


def _conf(port: int, supervisor: Path) -> str:
    return f"""\
[unix_http_server]
file=/root/lab/supervisor.sock

[supervisord]
nodaemon=true
logfile=/root/lab/supervisord.log
pidfile=/root/lab/supervisord.pid
childlogdir=/root/lab

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix:///root/lab/supervisor.sock

[program:vllm]
command=/root/vllm/bin/python /root/lab/server.py {port}
directory=/root/lab
stdout_logfile=/root/lab/vllm.log
redirect_stderr=true
startsecs=1
stopwaitsecs=10
environment=LAB_DIR="/root/lab"

[program:load]
command={envs.HOST_PYTHON} /root/lab/load.py {port} {STREAMS}
stdout_logfile=/root/lab/load.log
redirect_stderr=true
startsecs=0
"""


@dataclass
class LabHost:
    ssh: sshd.SshHost
    port: int
    supervisord: subprocess.Popen[bytes] | None = None

    @property
    def lab(self) -> Path:
        return self.ssh.home / "lab"

    @property
    def site(self) -> Path:
        return envs.site_packages(self.ssh.home / "vllm")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def file(self, rel: str) -> Path:
        return self.site / rel


@dataclass
class RolloutLab:
    ssh: sshd.SshLab
    hosts: list[LabHost]
    supervisor: Path
    pristine: dict[str, bytes] = field(default_factory=dict)
    offset: int = 0  # the first host's index in `ssh` (a part of a larger lab: `part`)

    def part(self, first: int, n: int) -> RolloutLab:
        """Hosts first..first+n-1 as a lab of their own (indices from 0, the same servers):
        one lab serves every test of a module, each on the hosts it needs."""
        hosts = self.hosts[first : first + n]
        return RolloutLab(self.ssh, hosts, self.supervisor, self.pristine, self.offset + first)

    def name(self, i: int) -> str:
        return self.hosts[i].ssh.name

    def ctl(self, i: int, *args: str) -> subprocess.CompletedProcess[str]:
        return self.ssh.ssh(self.offset + i, "/root/lab/ctl " + shlex.join(args), timeout=120)

    def pid(self, i: int) -> int:
        got = self.ctl(i, "pid", "vllm")
        return int(got.stdout.strip() or 0)

    def healthy(self, i: int) -> bool:
        try:
            with urllib.request.urlopen(self.hosts[i].base + "/health", timeout=5) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_healthy(self, i: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy(i):
            if time.monotonic() > deadline:
                log = (self.hosts[i].lab / "vllm.log").read_text()[-3000:]
                raise AssertionError(f"h{i + 1}: server not healthy after {timeout} s:\n{log}")
            time.sleep(0.5)

    def counters(self, i: int) -> Counters:
        with urllib.request.urlopen(self.hosts[i].base + "/metrics", timeout=10) as r:
            return parse(r.read().decode())

    def files(self, i: int) -> dict[str, bytes]:
        return {rel: self.hosts[i].file(rel).read_bytes() for rel in (SERVER_FILE, MODEL_FILE)}

    def inventory(self, path: Path, **per_host: dict[str, str]) -> Path:
        """hosts.toml: every host's python, restart command and URLs; `per_host[name]`
        overrides a host's fields (e.g. a failing restart command)."""
        lines = [
            "[defaults]",
            "python = '/root/vllm/bin/python'",
            "restart = '/root/lab/ctl restart vllm'",
            "",
        ]
        for h in self.hosts:
            fields = {
                "name": h.ssh.name,
                "address": h.ssh.name,
                "health": f"{h.base}/health",
                "metrics": f"{h.base}/metrics",
                **per_host.get(h.ssh.name, {}),
            }
            lines.append("[[host]]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in fields.items()]
            lines.append("")
        path.write_text("\n".join(lines))
        return path

    def set_streams(self, n: int | None) -> None:
        """Every host's load from now on: `n` streams (None: the load client's own STREAMS),
        written atomically (the load client reads the file every 0.2 s)."""
        for h in self.hosts:
            path = h.lab / "streams"
            if n is None:
                path.unlink(missing_ok=True)
                continue
            tmp = h.lab / "streams.tmp"
            tmp.write_text(f"{n}\n")
            tmp.replace(path)

    def held_restart(self, i: int) -> tuple[Path, Path, dict[str, str]]:
        """Host i's restart command that says it began (a marker) and then waits for a go
        file: the test acts while the host is provably in its restart step (changes the
        fleet's load, say), then lets the restart go on."""
        lab = self.hosts[i].lab
        began, go = lab / "restart-began", lab / "restart-go"
        began.unlink(missing_ok=True)
        go.unlink(missing_ok=True)
        cmd = (
            "touch /root/lab/restart-began; until test -e /root/lab/restart-go; do sleep 0.1; "
            "done; /root/lab/ctl restart vllm"
        )
        return began, go, {"restart": cmd}

    def supervise(self, i: int) -> None:
        """Start host i's supervisord (its server and load) through ssh, in the foreground:
        it lives in the host's session tree and stops with the host."""
        h = self.hosts[i]
        cmd = f"exec {self.supervisor}/bin/supervisord -c /root/lab/supervisord.conf"
        argv = self.ssh.ssh_argv(self.offset + i, cmd)
        with open(h.lab / "ssh-supervisord.log", "ab") as log:
            h.supervisord = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def die(self, i: int) -> None:
        """Host i goes down: its sshd, every session under it (agents, a restart command in
        flight) and its supervisord with the server, killed at once, as a power cut would."""
        self.hosts[i].ssh.stop()
        h = self.hosts[i]
        if h.supervisord is not None:
            h.supervisord.wait(timeout=30)  # the ssh client of a killed session ends too
        (h.lab / "supervisor.sock").unlink(missing_ok=True)
        (h.lab / "supervisord.pid").unlink(missing_ok=True)

    def revive(self, i: int) -> None:
        """Host i back up, as after a reboot: its sshd, then its supervisord, which starts
        the server on the files as they are; healthy before this returns."""
        self.hosts[i].ssh.start()
        self.supervise(i)
        self.wait_healthy(i)

    def close(self) -> None:
        for i, h in enumerate(self.hosts):
            if h.supervisord is not None and h.supervisord.poll() is None:
                self.ctl(i, "shutdown")
                try:
                    h.supervisord.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    h.supervisord.kill()
                    h.supervisord.wait()
        self.ssh.close(remove=False)


def start(n: int, root: Path) -> RolloutLab:
    """n lab hosts, every server healthy and under load, their files pristine."""
    supervisor = supervisor_venv()
    prom = prometheus_client_dir()

    def populate(host: sshd.SshHost) -> None:
        env = envs.clone(VLLM, host.home / "vllm")
        (envs.site_packages(env) / "_vpatch_test_prometheus.pth").write_text(f"{prom}\n")
        lab = host.home / "lab"
        lab.mkdir()
        shutil.copy(REPO / "tests" / "rollout_server.py", lab / "server.py")
        shutil.copy(REPO / "tests" / "rollout_load.py", lab / "load.py")
        ctl = lab / "ctl"
        ctl.write_text(
            f'#!/bin/sh\nexec {supervisor}/bin/supervisorctl -c /root/lab/supervisord.conf "$@"\n'
        )
        ctl.chmod(0o755)

    ssh = sshd.start_lab(n, root, populate)
    ports = sshd._free_ports(n)  # after the sshds bound theirs
    hosts = [LabHost(h, ports[i]) for i, h in enumerate(ssh.hosts)]
    lab = RolloutLab(ssh, hosts, supervisor)
    try:
        for h in hosts:
            (h.lab / "supervisord.conf").write_text(_conf(h.port, supervisor))
        for i in range(n):
            lab.supervise(i)
        for i in range(n):
            lab.wait_healthy(i)
        lab.pristine = lab.files(0)
    except BaseException:
        lab.close()
        raise
    return lab
