"""CPU the hosts spent: what the sshd listeners' reaped descendants used (cutime + cstime).

Every session on a lab host (the per-connection sshd, the shell, sed or python under it) is a
descendant of that host's listener, and each level waits for its children, so when a session
ends its CPU time is added to the listener's "children" counters. The hosts share this
machine's cores with the controller: this is the part of a run's cost that a real fleet would
spread over N machines, and the reason the wall time of 32 hosts on 2 cores is not flat.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from tests import sshd as harness

_TICK = os.sysconf("SC_CLK_TCK")


def _fields(pid: int) -> list[str] | None:
    try:
        raw = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # from field 3 (state) on


class HostCpu:
    def __init__(self, labs: Iterable[harness.SshLab]) -> None:
        self.pids = {h.pid for lab in labs for h in lab.hosts}

    def _busy(self) -> bool:
        """Does any listener still have a child (a session not yet over and reaped)?"""
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                f = _fields(int(entry.name))
                if f is not None and int(f[1]) in self.pids:
                    return True
        return False

    def read(self, settle: float = 5.0, live: bool = False) -> float:
        """Seconds of CPU of every finished session so far, after the last one is reaped.

        `live`: without waiting, and with every session process still running counted too
        (its own CPU and its reaped children's): a shared connection's sshd (bench/mux.py)
        outlives the command that used it, so its CPU is never reaped during a run."""
        if live:
            return self._tree(self.pids) / _TICK
        deadline = time.monotonic() + settle
        while self._busy() and time.monotonic() < deadline:
            time.sleep(0.01)
        total = 0
        for pid in self.pids:
            f = _fields(pid)
            if f is not None:
                total += int(f[13]) + int(f[14])  # cutime, cstime (fields 16, 17)
        return total / _TICK

    def _tree(self, roots: set[int]) -> int:
        """Ticks of the listeners' reaped children plus every live descendant's own and
        reaped children's: each finished process is counted once, in the live ancestor that
        reaped it."""
        parent: dict[int, int] = {}
        stats: dict[int, list[str]] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                f = _fields(int(entry.name))
                if f is not None:
                    parent[int(entry.name)], stats[int(entry.name)] = int(f[1]), f
        total = 0
        for pid, f in stats.items():
            up = pid
            while up in parent and up not in roots and up > 1:
                up = parent[up]
            if pid in roots:
                total += int(f[13]) + int(f[14])
            elif up in roots:
                total += sum(int(x) for x in f[11:15])  # utime, stime, cutime, cstime
        return total


def process_seconds(pid: int) -> float:
    """User + system CPU seconds one live process has spent (0 when it is gone)."""
    f = _fields(pid)
    return (int(f[11]) + int(f[12])) / _TICK if f is not None else 0.0
