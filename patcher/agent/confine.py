"""Paths from the journal are data the environment's owner can write: confine them before use.

Why: rollback writes a backup to the journal's `path`, and inspect reads every journaled path.
An entry pointing outside site-packages made rollback write there; one naming a FIFO hung
`status`, `/dev/zero` ran it out of memory. So every path vpatch reads or writes because the
journal (or a commit request built from it) names it must be a regular file under one of the
environment's own site-packages directories (their real paths), with no symlink anywhere below
that directory: `reach` walks to it by descriptor (fdwalk.py) and hands the caller the open
directory, so the file is read or written through what was checked, never by its name again.
"""

from __future__ import annotations

import os
import stat
import sys

from . import fdwalk, protocol

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Agent error kind (the `kind` of an {"ok": false} answer): a commit's write path is not a
# regular file confined to this environment's site-packages.
KIND_CONFINED = protocol.CONFINED


_SITE: list[str | None] = []  # site.getsitepackages(own prefixes): read once per agent
_SYSCONFIG: list[str | None] = []  # sysconfig's purelib and platlib: the same, when needed


class Roots(list):  # type: ignore[type-arg]
    """This environment's own site-packages dirs, real paths, as `roots()` gives them: site's
    list for its prefix (never the base interpreter's of a --system-site-packages venv),
    completed by `complete()` with sysconfig's purelib/platlib (sysconfig loads the
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
        # The environment's own prefixes only: a venv made with --system-site-packages also
        # reads the base interpreter's dirs (site's PREFIXES), which are not the env's.
        own = list(dict.fromkeys((sys.prefix, sys.exec_prefix)))
        _SITE[:] = list(getsite(own)) if getsite is not None else []
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
    """Real paths of this environment's own site-packages dirs (site's list for its prefix;
    purelib and platlib on demand: `Roots`)."""
    return Roots(_real(_site_dirs()))


MISSING = "does not exist"  # why_not's answer for a path (or a directory of it) that is gone


def why_not(path: Any, dirs: list[str], must_exist: bool = True) -> str:
    """Why `path` is not a confined regular file ("" when it is): `reach`, for a caller that
    only asks."""
    try:
        found, _name = reach(path, dirs, must_exist)
    except fdwalk.Unsafe as exc:
        return exc.why
    except FileNotFoundError:
        return MISSING
    except OSError as exc:
        return "cannot be checked (%s)" % exc.strerror
    found.close()
    return ""


def reach(path: Any, dirs: list[str], must_exist: bool = True) -> tuple[fdwalk.Dir, str]:
    """(the open directory that holds `path`, its name there), reached by a descriptor walk
    from the site-packages dir it lies under (fdwalk): no component a link, the file itself
    (when it exists; it must when `must_exist`) a regular file. What is refused raises
    fdwalk.Unsafe, a missing component FileNotFoundError. The caller acts on the directory
    it is given, so what was checked is what is used."""
    if not isinstance(path, str) or not os.path.isabs(path) or "\0" in path:
        raise fdwalk.Unsafe("is not an absolute path", str(path))
    if os.path.normpath(path) != path:
        raise fdwalk.Unsafe("is not a normal path (has '.', '..' or '//')", path)
    root = next((d for d in dirs if path.startswith(d.rstrip(os.sep) + os.sep)), None)
    if root is None and isinstance(dirs, Roots):
        dirs = dirs.complete()
        root = next((d for d in dirs if path.startswith(d.rstrip(os.sep) + os.sep)), None)
    if root is None:
        raise fdwalk.Unsafe(
            "is outside this environment's site-packages (%s)" % ", ".join(dirs), path
        )
    rel = path[len(root.rstrip(os.sep)) + 1 :].split(os.sep)
    with fdwalk.open_root(root) as top:
        found, name = fdwalk.reach(top, rel)
    try:
        st = found.lstat(name)
        if st is None:
            if must_exist:
                raise FileNotFoundError(2, "No such file or directory", path)
        elif stat.S_ISLNK(st.st_mode):
            raise fdwalk.Unsafe("goes through a symlink (%s)" % path, path)
        else:
            found.check(st, name)
    except BaseException:
        found.close()
        raise
    return found, name
