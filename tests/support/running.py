"""A `vpatch rollout` running under a test (subprocess.Popen): waiting for the place the
test needs it at, read off its report, which the controller rewrites atomically as it goes."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any


def until(proc: subprocess.Popen[str], what: Any, timeout: float = 300) -> None:
    """Wait for `what()` while the rollout runs (one that ended says why, at once)."""
    deadline = time.monotonic() + timeout
    while not what():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the rollout ended early ({proc.returncode}): {out}{err}")
        assert time.monotonic() < deadline, "the rollout never got there"
        time.sleep(0.1)


def report_hosts(report: Path) -> dict[str, dict[str, Any]]:
    """The report's hosts by target ({} while it is not written yet: its rename is atomic,
    so it is never read half)."""
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError):
        return {}
    return {h["target"]: h for h in doc["hosts"]}
