"""One exclusive flock per environment: commits and rollbacks never interleave.

flock is released by the kernel when the process dies, so a SIGKILLed agent never leaves a lock
that blocks the next run (the lock file itself may stay; it is only a handle).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

from . import peer

# What opening the lock file for writing answers on a read-only mount or a state dir this user
# may read but not write: reads go on without the lock (see agent._locked), writes are refused.
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional

    # Opens the lock file and returns its descriptor (statedir opens it without following
    # links).
    Opener = Optional[Callable[[], int]]


class Locked:
    def __init__(self, path: str, timeout: float = 60.0, opener: Opener = None) -> None:
        self.path = path
        self.timeout = timeout
        self.opener = opener
        self.fd = -1

    def __enter__(self) -> Locked:
        if self.opener is not None:
            self.fd = self.opener()
        else:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    raise TimeoutError("another vpatch holds %s" % self.path) from None
                if peer.gone():  # nobody will read the answer: stop waiting (peer.py)
                    os.close(self.fd)
                    raise peer.CallerGone() from None
                time.sleep(0.05)

    def __exit__(self, *exc: Any) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def held(path: str, opener: Opener = None) -> bool:
    """True when another process holds the lock right now (for `status`)."""
    if opener is not None:
        try:
            fd = opener()
        except FileNotFoundError:
            return False
    elif not os.path.exists(path):
        return False
    else:
        fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
