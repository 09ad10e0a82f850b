"""What a rollout step left on the host, so that `vpatch rollout --resume` judges nothing on a
host that changed since (a rollback or an apply by hand, an upgrade, a server restart).

A stored window describes the server it measured, on the files it ran. `--resume` judges it
later, after a Ctrl-C or a lost controller, and in between a person may have rolled the patch
back (the lease, parked, allows it), applied it again, upgraded the package, or restarted the
server. So each step entry carries `seen`, the host as the step left it, stamped by the agent
while it appends the entry (restart.record, under the environment's lock), and an inspect
asked `seen_for` answers the same for now; the controller compares the two
(patcher.rollout.resume.changes). Kept apart from facts and restart, which both
use it.

`seen`: {"files": {path: {"sha256": the file's bytes now, "applied": {spec: txn}}}, and
"server": [[pid, start], ...] at the steps after which the measured server must stay
(SERVER_STEPS) and in every inspect answer}. `files` holds each journaled file one of the
rollout's specs is applied to (the journal's fold, facts._journal_state); `server` the
environment's processes (procs.scan: the environment's interpreter, not agents), oldest first,
at most MAX_PROCS of them: a host without /proc gives none, and nothing is compared then.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent does not import typing (~4 ms per start)
    from typing import Any

SERVER_STEPS = ("window", "gates")  # after these, the measured server must be the one running
MAX_PROCS = 64


def snapshot(
    state: dict[str, Any], specs: list[str], server: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """The `seen` of `specs` from the journal's fold `state` (path -> {"applied": {spec:
    entry}, "current": sha256}) and the processes `server` (procs.scan's; None: not asked)."""
    want = set(specs)
    files: dict[str, Any] = {}
    for path, st in sorted(state.items()):
        applied = st.get("applied") or {}
        mine = {sid: str(e.get("txn")) for sid, e in applied.items() if sid in want}
        if mine:
            files[path] = {"sha256": st.get("current"), "applied": mine}
    out: dict[str, Any] = {"files": files}
    if server is not None:
        out["server"] = [[p["pid"], p["started"]] for p in server[:MAX_PROCS]]
    return out


def server_now() -> list[dict[str, Any]]:
    """The environment's processes now, oldest first (procs.scan through rootscan: a worker
    that dropped root asks stage 0, which can read other users' processes)."""
    from . import procs, rootscan

    return rootscan.processes(procs.now())
