"""Named fault points for crash testing: TEST-ONLY, inert unless a test arms one.

Why: "nothing can leave a host half-patched" is only believable if the suite kills the agent at
every step of a commit and shows the next run recovers (tests/integration/test_faults.py). So
each step calls `point(name)`; unarmed, that costs one comparison and does nothing else.

How a test arms a point (no public CLI flag exists, on purpose):
    VPATCH_TEST_FAULT=<spec>   read by the CONTROLLER (patcher.run.engine), which copies it into the
                               `fault` field of its commit requests, so it also reaches agents
                               over SSH (a remote host never sees the controller's environment);
    VPATCH_AGENT_FAULT=<spec>  read by the agent itself (local runs only; any op).
A request's `fault` arms a point for THAT request only: the agent re-arms before every request
(`arm(req.get("fault") or ENV_SPEC)`), since one agent process now answers many requests.
`<spec>` is `name` (SIGKILL the agent there) or `name:pause` (SIGSTOP it there, so a test can
cut the SSH connection while the agent is provably parked at that step; the harness kills it).
`name#N` fires at the Nth time the point is reached: a multi-file commit passes the per-file
steps once per file, and the crash between two files' renames is the one that matters most.
Names are in POINTS, in the order a one-file commit reaches them; steps that only happen when
needed (a backup that already exists is not rewritten) are skipped by the commit, not faked.
"""

from __future__ import annotations

import os

# The steps of one commit (apply and rollback alike), in order. Keep in sync with op_commit.
POINTS = (
    "commit.locked",  # lock held, nothing written yet
    "write.temp_written",  # new bytes in a temp file next to the target, not yet fsync'ed
    "write.temp_synced",  # temp file fsync'ed, given the target's mode/owner
    "backup.temp_written",  # backup bytes in a temp file in backups/, fsync'ed, not renamed
    "backup.written",  # backup renamed into place
    "journal.appended",  # journal entries written, not yet fsync'ed
    "write.before_rename",  # journal fsync'ed; the target still has its old bytes
    "write.renamed",  # target replaced by rename; directory not yet fsync'ed
    "write.dir_synced",  # directory fsync'ed: the rename is durable
    "commit.bytecode",  # __pycache__ refreshed
    "marker.appended",  # commit marker written, not yet fsync'ed
    "commit.done",  # marker fsync'ed, lock still held
    "commit.unlocked",  # lock released, answer not yet sent
)

# Points outside a plain commit's steps, where a race test parks the agent (`name:pause`),
# lets the environment's owner move, then resumes it (SIGCONT) to show the move wins nothing:
# a repair that has checked and hashed the journal's files and is about to put them back.
RACE_POINTS = ("repair.checked",)

ENV_SPEC = os.environ.get("VPATCH_AGENT_FAULT", "")
_ARMED = {"spec": ENV_SPEC}
REACHED: list[str] = []  # points passed by the current request (reset per request)


def arm(spec: str) -> None:
    """Arm a fault point for the request about to run ("" disarms); remote hosts do not see
    the controller's env, so the controller sends the spec in the request."""
    _ARMED["spec"] = spec


def point(name: str) -> None:
    """Mark a step; die (or park) here if a test asked for it."""
    REACHED.append(name)
    spec = _ARMED["spec"]
    if not spec:
        return
    armed, _, mode = spec.partition(":")
    armed, _, nth = armed.partition("#")  # "write.renamed#2": the second file's rename
    if armed != name or (nth and REACHED.count(name) != int(nth)):
        return
    import signal  # only when a test armed this point: signal imports enum (~3 ms per start)

    if mode == "pause":
        os.kill(os.getpid(), signal.SIGSTOP)  # the test cuts the connection, then kills us
    else:
        os.kill(os.getpid(), signal.SIGKILL)
