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


_SITE: list[str | None] = []  # site.getsitepackages(): configuration, read once per agent
_SYSCONFIG: list[str | None] = []  # sysconfig's purelib and platlib: the same, when needed


class Roots(list):  # type: ignore[type-arg]
    """This interpreter's site-packages dirs, real paths, as `roots()` gives them: site's
    list, completed by `complete()` with sysconfig's purelib/platlib (sysconfig loads the
    build's config data, ~1 ms per agent) only for a path under none of site's dirs. In a venv
    or a distribution's Python those are among site's anyway, and the check of a path under
    one of them does not depend on which root it starts from: every root is a real path, so
    there is no link between two nested ones for the walk from the outer one to find."""

    def complete(self) -> list[str]:
        if not _SYSCONFIG:
            import sysconfig

            paths = sysconfig.get_paths()
            _SYSCONFIG[:] = [paths.get("purelib"), paths.get("platlib")]
        return _real(_SYSCONFIG + _site_dirs())


def _site_dirs() -> list[str | None]:
    if not _SITE:
        import site  # loaded already: `python -I` runs it

        getsite = getattr(site, "getsitepackages", None)
        _SITE[:] = list(getsite()) if getsite is not None else []
        _SITE.append(None)  # (read: an interpreter without site dirs is not asked again)
    return _SITE


def _real(found: list[str | None]) -> list[str]:
    """Each existing directory's real path, once, in order: asked on every call (a dir
    swapped for a link since the last one counts)."""
    out: list[str] = []
    for d in found:
        if d and os.path.isdir(d):
            real = os.path.realpath(d)
            if real not in out:
                out.append(real)
    return out


def roots() -> Roots:
    """Real paths of this interpreter's site-packages dirs (site's list; purelib and platlib
    on demand: `Roots`)."""
    return Roots(_real(_site_dirs()))


MISSING = "does not exist"  # why_not's answer for a path (or a directory of it) that is gone


def why_not(path: Any, dirs: list[str], must_exist: bool = True) -> str:
    """Why `path` is not a confined regular file ("" when it is)."""
    if not isinstance(path, str) or not os.path.isabs(path) or "\0" in path:
        return "is not an absolute path"
    if os.path.normpath(path) != path:
        return "is not a normal path (has '.', '..' or '//')"
    root = next((d for d in dirs if path.startswith(d.rstrip(os.sep) + os.sep)), None)
    if root is None and isinstance(dirs, Roots):
        dirs = dirs.complete()
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
            return MISSING if must_exist or i < len(parts) - 1 else ""
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
