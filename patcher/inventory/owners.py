"""An inventory is an input like a spec: it says which hosts are reached, as whom, and which
commands run for them (a rollout's `restart` and `health`; with `transport = "local"` or
`ansible_connection=local` they run on this machine, as the user vpatch runs as). So it is read
only when nobody but that user or root could have written what decides it: the inventory file
and its directory, an Ansible inventory's `group_vars/` and `host_vars/` next to it (every
directory and file there, as Ansible reads them), and the identity files it names. The rule is
the one specs' catalogs and wheel sources have (patcher.specs.catalog.writer_problem): owned by
this user or root, writable by neither group nor others; the file is checked on the descriptor
it is read from, its directory by the real path of that descriptor.

A refusal names the file and who else could write it. `--trust-inventory` reads it anyway: a
person's decision on the command line, never a default or an inventory's own setting.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from patcher.errors import SpecError
from patcher.specs.catalog import writer_problem

HINT = (
    "make it yours (or root's) and writable by nobody else (chown/chmod), or pass "
    "--trust-inventory once you have read it and trust whoever can write it"
)
_READ_MAX = 64 << 20  # an inventory of 100k hosts is a few MB


def refused(path: str, why: str) -> SpecError:
    """The refusal of one file the inventory is made of."""
    return SpecError(
        f"{path}: {why}; refused: an inventory decides which hosts, users and commands vpatch runs",
        HINT,
    )


def read(path: str, trust: bool) -> str:
    """The inventory's text, read from one descriptor that was checked (unless `trust`): a
    regular file that is this user's or root's and closed to others, in a directory of the
    same kind or a root-owned sticky one (/tmp). OSError and UnicodeDecodeError are the
    caller's to word."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO must not hang us
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(f"{path}: not a regular file", "pass a hosts.toml or an INI/YAML file")
        if not trust:
            why = writer_problem(st)
            if why:
                raise refused(path, why)
            parent = os.path.dirname(_real(fd, path))
            where = os.stat(parent)
            why = None if _sticky_roots(where) else writer_problem(where)
            if why:
                raise refused(path, f"its directory {parent} is {why}")
        return fh.read(_READ_MAX).decode("utf-8")


def _sticky_roots(st: os.stat_result) -> bool:
    """A directory like /tmp: root's, with the sticky bit, so that others may add files there
    but never rename or remove this user's own (the file itself was checked)."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and bool(st.st_mode & stat.S_ISVTX)


def _real(fd: int, path: str) -> str:
    proc = f"/proc/self/fd/{fd}"  # the opened file's own path (Linux); else the name's
    return os.readlink(proc) if os.path.exists(proc) else os.path.realpath(path)


def vars_problem(inventory: str) -> tuple[str, str] | None:
    """(path, why) of the first directory or file under the inventory's `group_vars/` and
    `host_vars/` that someone else could have written (links followed, as Ansible follows
    them; each directory walked once); None when there is none."""
    base = os.path.dirname(os.path.realpath(inventory))
    seen: set[tuple[int, int]] = set()
    for name in ("group_vars", "host_vars"):
        top = os.path.join(base, name)
        if not os.path.exists(top):
            continue
        todo = [top]
        while todo:
            here = todo.pop()
            st = os.stat(here)
            why = writer_problem(st)
            if why:
                return here, why
            if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            todo += sorted((os.path.join(here, n) for n in os.listdir(here)), reverse=True)
    return None


def file_problem(path: str) -> str | None:
    """Why a file the inventory names (an identity) could have been written by someone else
    (None: it could not, or it is not there: ssh says so when it needs it)."""
    try:
        st = os.stat(os.path.expanduser(path))
    except OSError:
        return None
    return writer_problem(st)


def check_vars(inventory: str, trust: bool) -> None:
    """Nothing, or the refusal of the first vars file or directory someone else could have
    written (vars_problem); nothing is checked when `trust`."""
    found = None if trust else vars_problem(inventory)
    if found:
        raise refused(*found)


def check_identities(inventory: str, tables: list[dict[str, Any]], trust: bool) -> None:
    """Nothing, or the refusal of an identity file the inventory's tables name ([defaults]
    and [[host]]: never --identity's, the person's own choice) that someone else could have
    written; nothing is checked when `trust`."""
    for table in [] if trust else tables:
        named = table.get("identity")
        why = file_problem(named) if named else None
        if named and why:
            raise refused(named, f"{why} (the identity {inventory} names)")
