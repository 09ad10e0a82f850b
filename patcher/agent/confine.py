"""Paths from the journal are data the environment's owner can write: confine them before use.

Why: rollback writes a backup to the journal's `path`, and inspect reads every journaled path.
An entry pointing outside site-packages made rollback write there; one naming a FIFO hung
`status`, `/dev/zero` ran it out of memory. So every path vpatch reads or writes because the
journal (or a commit request built from it) names it must be a regular file under one of the
environment's own site-packages directories (their real paths), with no symlink anywhere below
that directory; checked by lstat, component by component, when inspect reads it and again when
a commit writes it (a package dir swapped for a link in between is refused then).
"""

from __future__ import annotations

import os
import stat

from . import protocol

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Agent error kind (the `kind` of an {"ok": false} answer): a commit's write path is not a
# regular file confined to this environment's site-packages.
KIND_CONFINED = protocol.CONFINED


_CONFIGURED: list[str | None] = []  # the interpreter's own list: it cannot change while it runs


def roots() -> list[str]:
    """Real paths of this interpreter's site-packages dirs (purelib, platlib, site's list).

    Which directories those are is the interpreter's configuration, read once per agent
    (sysconfig loads the build's config data: ~1 ms); whether each is a directory now and
    where it really is are asked on every call (a dir swapped for a link in between counts)."""
    if not _CONFIGURED:
        import site
        import sysconfig

        found = [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
        getsite = getattr(site, "getsitepackages", None)
        if getsite is not None:
            found += list(getsite())
        _CONFIGURED[:] = found or [None]
    out: list[str] = []
    for d in _CONFIGURED:
        if d and os.path.isdir(d):
            real = os.path.realpath(d)
            if real not in out:
                out.append(real)
    return out


def why_not(path: Any, dirs: list[str], must_exist: bool = True) -> str:
    """Why `path` is not a confined regular file ("" when it is)."""
    if not isinstance(path, str) or not os.path.isabs(path) or "\0" in path:
        return "is not an absolute path"
    if os.path.normpath(path) != path:
        return "is not a normal path (has '.', '..' or '//')"
    root = next((d for d in dirs if path.startswith(d.rstrip(os.sep) + os.sep)), None)
    if root is None:
        return "is outside this environment's site-packages (%s)" % ", ".join(dirs)
    where = root
    parts = path[len(root.rstrip(os.sep)) + 1 :].split(os.sep)
    for i, part in enumerate(parts):
        where = os.path.join(where, part)
        try:
            st = os.lstat(where)
        except FileNotFoundError:
            return "does not exist" if must_exist or i < len(parts) - 1 else ""
        except OSError as exc:
            return "cannot be checked (%s)" % exc.strerror
        if stat.S_ISLNK(st.st_mode):
            return "goes through a symlink (%s)" % where
        last = i == len(parts) - 1
        if not last and not stat.S_ISDIR(st.st_mode):
            return "has a non-directory component (%s)" % where
        if last and not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
    return ""
