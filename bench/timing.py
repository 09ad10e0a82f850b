"""Run one command, measure its wall time and the CPU its whole process tree spent.

CPU comes from wait4(): user + system time of the process and of every descendant it waited
for (ansible's forks and their ssh clients, xargs' ssh clients, vpatch's threads). That is the
controller's cost; the hosts' share (sshd, remote python) runs on the same 2 cores here but is
not in it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The contenders' environment: ours, minus PYTHONDONTWRITEBYTECODE (set on some dev
    machines), so Python tools keep their .pyc caches as they do after a pip install; the
    warm-up run writes them. Applies to vpatch and ansible alike."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **(extra or {})}


@dataclass(frozen=True)
class Timed:
    wall: float
    cpu: float
    code: int
    out: str
    err: str


def timed(
    argv: Sequence[str],
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float = 300.0,
) -> Timed:
    """Run argv to completion (stdin /dev/null, output to temp files, not pipes: nothing on our
    side has to keep reading while the clock runs)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env if env is not None else child_env(),
            cwd=cwd,
        )
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Timed(
            wall=wall,
            cpu=usage.ru_utime + usage.ru_stime,
            code=proc.returncode,
            out=out.read().decode("utf-8", "replace"),
            err=err.read().decode("utf-8", "replace"),
        )


def summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }
