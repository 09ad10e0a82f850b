"""File primitives for the agent (stdlib only, Python 3.9+): hashing, atomic writes, bytecode.

Why each step: a rename is the only write a crash cannot tear, so new bytes go to a temp file in
the same directory, are fsync'ed, get the old file's mode/owner, and replace it by rename; the
directory is fsync'ed so the rename itself survives power loss. Bytecode is refreshed right away
because a same-size edit within the same second as the old mtime leaves a timestamp .pyc that
CPython still trusts (CPython issue #75953).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import py_compile
import tempfile

from . import faults


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, like: str | None = None, tag: str = "write") -> None:
    """Replace `path` with `data` by rename, keeping the mode/owner of `like` (default: path)."""
    directory = os.path.dirname(path) or "."
    ref = like or path
    st = os.stat(ref) if os.path.exists(ref) else None
    fd, tmp = tempfile.mkstemp(prefix=".vpatch-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            faults.point(tag + ".temp_written")
            fh.flush()
            os.fsync(fh.fileno())
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
            if os.geteuid() == 0:
                os.chown(tmp, st.st_uid, st.st_gid)
        faults.point(tag + ".before_rename")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    faults.point(tag + ".renamed")
    fsync_dir(directory)


def refresh_bytecode(path: str) -> str:
    """Rewrite the interpreter's .pyc for `path` and drop other optimisation levels.

    Returns a short note for the report ("" when all went well). Failure to write bytecode is not
    fatal (Python recompiles from source when the .pyc is absent), but a stale .pyc that cannot be
    removed is reported.
    """
    notes = []
    cache = importlib.util.cache_from_source(path)
    for opt in ("", 1, 2):
        other = importlib.util.cache_from_source(path, optimization=opt)
        if other != cache and os.path.exists(other):
            try:
                os.unlink(other)
            except OSError as exc:
                notes.append("cannot remove stale %s: %s" % (other, exc.strerror))
    try:
        py_compile.compile(path, cfile=cache, doraise=True, invalidation_mode=_mode())
    except (OSError, py_compile.PyCompileError) as exc:
        try:
            if os.path.exists(cache):
                os.unlink(cache)
        except OSError as exc2:
            notes.append("stale bytecode %s left: %s" % (cache, exc2.strerror))
        notes.append("bytecode not refreshed: %s" % exc)
    return "; ".join(notes)


def _mode() -> py_compile.PycInvalidationMode:
    """The invalidation mode this interpreter would use itself (honours SOURCE_DATE_EPOCH)."""
    return py_compile._get_default_invalidation_mode()


def compile_check(data: bytes, path: str) -> str | None:
    """Syntax check on the TARGET interpreter (it may be older than the controller's)."""
    try:
        compile(data, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return "%s (line %s)" % (exc.msg, exc.lineno)
    except ValueError as exc:
        return str(exc)
    return None
