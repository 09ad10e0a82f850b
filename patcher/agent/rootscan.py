"""The restart scan as a worker gets it, and the worker's standing it depends on.

Why a module of its own: the ops that name the processes still running old code (commit, and
facts' `procs`) need the scan, and privsep's stage 0 answers the operator's restart op itself
(relay.py -> restart.py), which journals through commit and facts. Were the scan privsep's,
the agent's modules would import each other in a circle (privsep -> relay -> restart ->
commit -> privsep). So what both sides need sits below them all: the worker's standing
(`STATE`, which privsep.worker fills before `site` runs) and the pipe to stage 0 (`FD_ASK`,
`FD_ANSWER`, which privsep wires before the worker runs). Imports nothing of the agent at
load: stage 0 loads it with privsep, for the two numbers.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent does not import typing (~4 ms per start)
    from typing import Any

# The worker's ends of the restart-scan channel to stage 0 (after privsep.FD_BUNDLE, 3).
FD_ASK, FD_ANSWER = 4, 5

# What the worker was told and found (privsep.worker): {"uid": euid, "dropped_from": 0 or
# None, "run_as", "facts", "sites", "refused"}.
STATE: dict[str, Any] = {}
CHANGES_MAX = 128  # changed packages per scan question (a question is one line of < 64 KiB)


def processes(
    before: float, written: list[tuple[str, float]] | None = None
) -> list[dict[str, Any]]:
    """The restart scan for this worker (procs.scan): asked of stage 0 when the worker
    dropped root (it cannot read other users' processes), else scanned here. Here, not in
    procs, so that procs (which stage 0 runs) never asks anyone.

    `written`: (real path, boot-clock time) of each file changed: the processes that hold
    one of them now (holders.decide); None: every process of the environment started
    before `before` (the server `vpatch rollout --resume` compares)."""
    from . import procs

    if before < 0 or not os.path.isdir("/proc"):
        return []
    sites = procs.site_dirs()
    changes = None if written is None else procs.changes(written, sites)
    asked = scan(before, sites, changes)
    if asked is not None:
        return asked
    return procs.scan(before, None, changes)


def scan(
    before: float, sites: list[str], changes: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]] | None:
    """Ask stage 0 for the restart scan; None when this worker may scan itself (it is root,
    or there is no stage 0)."""
    if os.geteuid() == 0 or STATE.get("dropped_from") is None:
        return None
    from . import wire

    try:
        q = {"before": before, "sites": sites, "changes": changes}
        if changes is not None:
            q["changes"] = changes[:CHANGES_MAX]
        os.write(FD_ASK, (wire.dumps(q) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = os.read(FD_ANSWER, 1 << 20)
            if not chunk:
                return []
            buf += chunk
        found = wire.loads(buf.decode("utf-8"))
    except (OSError, ValueError):
        return []
    return found if isinstance(found, list) else []
