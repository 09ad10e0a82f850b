"""The caller is gone: end the agent (stdlib only, Python 3.9+).

Why: the agent reads its next request only between requests, so while one runs (a commit
waiting for the lock another run holds, a long verify) nothing noticed that the controller had
given up: an orphaned root agent kept running, and then wrote, after the operator saw a
failure. A transport's end of the agent's stdout (a pipe or socket: ssh, sudo and the local
transport all hand it one) closing is the sign: nobody will ever read the answer. So a thread
waits for exactly that (poll with no events asked: POLLERR/POLLHUP come anyway) and ends the
process at once, as a SIGKILL would: every commit step is safe to cut (journal.pending), a
probe's process group dies with its agent (probe.py), the kernel drops the lock.

Not stdin: a one-shot caller (Ray, Ansible) sends its request and EOF, then waits for the
answer, so EOF on stdin during a request is normal; an idle session ends on it (main).
"""

from __future__ import annotations

import os
import stat

CALLER = 1  # the agent's stdout


def watch() -> bool:
    """Start the watcher when stdout is a pipe or socket (else there is no peer to lose)."""
    try:
        mode = os.fstat(CALLER).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False
    import _thread  # the C module: `threading` costs imports the agent does without

    _thread.start_new_thread(_wait, (CALLER,))
    return True


def _wait(fd: int) -> None:
    import select

    poller = select.poll()
    poller.register(fd, 0)
    while True:
        for _fd, ev in poller.poll():
            if ev & (select.POLLERR | select.POLLHUP):
                os._exit(3)  # the answer has no reader: stop now, as a SIGKILL would
            if ev & select.POLLNVAL:  # stdout closed on purpose (main's BrokenPipe path)
                return
