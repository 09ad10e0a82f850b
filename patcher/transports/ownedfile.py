"""Files vpatch kept for itself and trusts when it reads them back (a rewrite or fact cache
entry, the kept agent bundle): read only through the descriptor that was checked.

In transports because the kept agent bundle (transports/bundle.py) is one of them and the
transports import no executor; the caches import it from here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_owned(path: Path, limit: int, owner: int | None = None) -> bytes | None:
    """The bytes of a kept file, checked on the descriptor it is read from (no link
    followed, no FIFO opened): a regular file with one link, `owner`'s (default: this
    process's user), writable by nobody else, at most `limit` bytes; None for anything else.
    Such a file is code vpatch writes into site-packages or sends to every host: one another
    user planted is never used."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != (os.geteuid() if owner is None else owner)
            or st.st_mode & 0o022
            or st.st_nlink != 1
        ):
            return None
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def user_named(uid: int) -> str:
    """`uid N (name)`, as a refusal names who could have written a file (`uid N` alone for a
    uid no user has)."""
    import pwd

    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def group_named(gid: int) -> str:
    """`N (name)` of a group, or `N` for one without a name."""
    import grp

    try:
        return f"{gid} ({grp.getgrgid(gid).gr_name})"
    except KeyError:
        return str(gid)
