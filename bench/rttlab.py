"""The lab's hosts behind one delay forwarder (bench/delay.py), switched per RTT.

Every stand-in host gets a forwarder port on 127.0.0.1; at RTT > 0 the lab's ssh_config names
those ports (the floor, vpatch, pyinfra and the mux rows read that file; ansible's inventory
takes `port()`), and the forwarder holds each chunk RTT/2 per direction. At RTT 0 the file
names the sshds' own ports again: loopback, as without this lab. known_hosts lists every host
key under both ports, so host keys are checked on either path.

`trips()` turns the forwarder's counters since `reset()` into one command's figures: the
answers each host's client waited for (`round_trips`, per host), one-way flights and
connections (per host), over the hosts that were contacted.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests import sshd as harness


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class RttLab:
    def __init__(self, lab: harness.SshLab, work: Path, mbit: float = 0.0) -> None:
        """`mbit`: each direction's bandwidth per host (bench/delay.py's --mbit; 0: none)."""
        self.lab = lab
        self.rtt_ms = 0.0
        listen = _free_ports(len(lab.hosts))
        self.ports = {h.name: p for h, p in zip(lab.hosts, listen, strict=True)}
        self.control = work / "delay.sock"
        routes = [f"{p}={h.port}" for h, p in zip(lab.hosts, listen, strict=True)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.delay", "--control", str(self.control)]
            + (["--mbit", str(mbit)] if mbit > 0 else [])
            + routes,
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(Path(__file__).resolve().parent.parent),
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("bench.delay did not start")
        self.direct = lab.ssh_config.read_text()
        self.routed = self._routed(self.direct)
        with lab.known_hosts.open("a") as kh:
            for h in lab.hosts:
                key = h.known_hosts_line.split(" ", 1)[1]
                kh.write(f"[{h.address}]:{self.ports[h.name]} {key}\n")

    def _routed(self, text: str) -> str:
        out, host = [], None
        for line in text.splitlines():
            word = line.strip().split(" ", 1)
            if word[0] == "Host":
                host = word[1] if len(word) > 1 else None
            if word[0] == "Port" and host in self.ports:
                line = f"  Port {self.ports[host]}"
            out.append(line)
        return "\n".join(out) + "\n"

    def _ask(self, line: str) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(self.control))
            s.sendall(line.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        answer: dict[str, Any] = json.loads(data)
        return answer

    def set(self, rtt_ms: float) -> None:
        """RTT from now on: 0 is loopback (the forwarder out of the path)."""
        self.rtt_ms = rtt_ms
        self._ask(f"delay {rtt_ms / 2}")
        self.lab.ssh_config.write_text(self.routed if rtt_ms > 0 else self.direct)

    def port(self, host: harness.SshHost) -> int:
        """The port a client reaches `host` on at the current RTT (ansible's inventory)."""
        return self.ports[host.name] if self.rtt_ms > 0 else host.port

    def reset(self) -> None:
        self._ask("reset")

    def trips(self) -> dict[str, float]:
        """Per host contacted since reset(): round trips, flights and connections (means)."""
        if self.rtt_ms <= 0:
            return {}
        # a host contacted: any flight (a shared connection's master connected before reset)
        counts = [c for c in self._ask("stats")["ports"].values() if c["flights"]]
        if not counts:
            return {}
        n = len(counts)
        return {
            "round_trips": sum(c["round_trips"] for c in counts) / n,
            "flights": sum(c["flights"] for c in counts) / n,
            "connections": sum(c["connections"] for c in counts) / n,
            "kib_down": sum(c["bytes_down"] for c in counts) / n / 1024,
            "kib_up": sum(c["bytes_up"] for c in counts) / n / 1024,
        }

    def close(self) -> None:
        self.lab.ssh_config.write_text(self.direct)
        try:
            self._ask("quit")
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own child
            self.proc.wait()
