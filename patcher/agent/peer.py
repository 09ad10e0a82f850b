"""Is anyone still waiting for this agent's answer? (stdlib only, Python 3.9+)

Why: the agent reads its next request only between requests, so while it waited inside one
(for the lock another run holds, up to the request's lock_timeout) nothing noticed that the
controller had given up: an orphaned root agent kept waiting, and would then have written,
after the operator saw a failure. A transport's end of the agent's stdout (a pipe or socket:
ssh, sudo and the local transport all hand it one) closing is the sign that nobody will ever
read the answer (poll with no events asked: POLLERR/POLLHUP come anyway). Where the agent
waits, it asks `gone()` and stops waiting (the lock loop; probes watch the same fd, probe.py).

What it does not do: cut a commit that holds the lock. A network cut while a commit runs lets
that commit finish (`tests/integration/test_faults.py::test_ssh_cut_agent_finishes`): the
journal then tells the next run what happened, and a half-done commit would only need repair.
Not stdin either: a one-shot caller (Ray, Ansible) sends its request and EOF, then waits for
the answer, so EOF on stdin during a request is normal; an idle session ends on it (main).
"""

from __future__ import annotations

import os
import stat

CALLER = 1  # the agent's stdout


def gone() -> bool:
    """True when stdout is a pipe or socket whose reader has gone away."""
    try:
        mode = os.fstat(CALLER).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False
    import select  # only where the agent waits: not on every start

    poller = select.poll()
    poller.register(CALLER, 0)
    return any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in poller.poll(0))


class CallerGone(SystemExit):
    """Raised where the agent waits for a caller that is gone: the process ends (exit 3)
    once the request's `finally` blocks have run (the state it created is still adopted)."""

    def __init__(self) -> None:
        super().__init__(3)
