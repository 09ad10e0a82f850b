"""Named fault points for crash testing; inert unless a test sets VPATCH_AGENT_FAULT.

`VPATCH_AGENT_FAULT=<name>` (or a request's `fault` field) makes the agent kill itself with
SIGKILL when it reaches the point of that name, which is how the suite proves every step of a
commit is crash-safe. Nothing else reads them; unarmed, a point costs one comparison.
"""

from __future__ import annotations

import os
import signal

_ARMED = {"name": os.environ.get("VPATCH_AGENT_FAULT", "")}
REACHED: list[str] = []


def arm(name: str) -> None:
    """Arm a fault point from the request (remote hosts do not see the controller's env)."""
    _ARMED["name"] = name


def point(name: str) -> None:
    """Mark a step; die here if a test asked for it."""
    REACHED.append(name)
    if _ARMED["name"] and _ARMED["name"] == name:
        os.kill(os.getpid(), signal.SIGKILL)
