"""File primitives for the agent (stdlib only, Python 3.9+): hashing, atomic writes, bytecode.

Why each step: a rename is the only write a crash cannot tear, so new bytes go to a temp file in
the same directory, are fsync'ed, get the old file's mode/owner, and replace it by rename; the
directory is fsync'ed so the rename itself survives power loss. Bytecode is refreshed right away
because a same-size edit within the same second as the old mtime leaves a timestamp .pyc that
CPython still trusts (CPython issue #75953).
"""

from __future__ import annotations

import fcntl
import os
import stat

from . import faults

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The import system's own module (CPython: always loaded, it is how Python imports anything),
# for what py_compile and importlib.util would give: py_compile imports importlib.machinery,
# enum and traceback (~10 ms per agent start) for the one file a commit writes. Its .pyc
# helpers are private (py_compile's own way in): typed loosely, checked before use.
_bootstrap: Any
try:
    import _frozen_importlib_external as _bootstrap
except ImportError:  # pragma: no cover - another implementation
    from importlib import _bootstrap_external as _bootstrap

# sha256 straight from CPython's own implementation module when there is one: `hashlib` loads
# OpenSSL first (~2 ms per agent start). Same digest; hashlib where the build has no such module.
try:
    from _sha2 import sha256 as _sha256  # type: ignore[import-not-found]  # 3.12+
except ImportError:
    try:
        from _sha256 import sha256 as _sha256  # type: ignore[import-not-found]  # 3.9-3.11
    except ImportError:
        from hashlib import sha256 as _sha256

TEMP_PREFIX, TEMP_SUFFIX = ".vpatch-", ".tmp"
MAX_FILE_BYTES = 8 << 20  # a target file or a backup: ~40x vLLM's largest module


class TooBig(OSError):
    """A file is larger than vpatch reads (a journaled /dev/zero, a 10 GB file)."""


def sha256_bytes(data: bytes) -> str:
    digest: str = _sha256(data).hexdigest()
    return digest


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def read_fd(fd: int, limit: int, path: str) -> bytes:
    """At most `limit` bytes of an open regular file, read in chunks; TooBig beyond that."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(0, "not a regular file", path)
    if st.st_size > limit:
        raise TooBig(0, "larger than %d bytes (%d)" % (limit, st.st_size), path)
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise TooBig(0, "larger than %d bytes" % limit, path)


def read_regular(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes, bounded: never through a final symlink (O_NOFOLLOW), never
    blocking on a FIFO (O_NONBLOCK), never reading a device or more than `limit` bytes."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        return read_fd(fd, limit, path)
    finally:
        os.close(fd)


def free_bytes(path: str) -> int | None:
    """Bytes this process may still write on `path`'s filesystem (root may use the reserve)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return int(blocks * st.f_frsize)


def unwritable(directory: str) -> str:
    """Why this process cannot create files in `directory` ("" when it can), without writing:
    inspect must be able to say so while the host is still untouched."""
    if not os.path.isdir(directory):
        return "Not a directory"
    if os.access(directory, os.W_OK | os.X_OK):
        return ""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "Read-only file system"
    except OSError:
        pass
    return "Permission denied"


def mkstemp(directory: str) -> tuple[int, str]:
    """A new, empty, 0600 `.vpatch-*.tmp` file in `directory`, opened for writing (what
    tempfile.mkstemp does, without importing tempfile and random on every agent call)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        path = os.path.join(directory, TEMP_PREFIX + os.urandom(8).hex() + TEMP_SUFFIX)
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError("no free temporary name in %s" % directory)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Staged:
    """New bytes for `path` in a locked temp file next to it, ready to be renamed over it.

    The temp file holds an flock for as long as this object lives, so `sweep` (run by the next
    commit) can tell the temp file of a live writer from one a killed writer left behind."""

    def __init__(self, path: str, tmp: str, fd: int) -> None:
        self.path, self.tmp, self.fd = path, tmp, fd

    def publish(self, tag: str = "write") -> None:
        """Rename over the target, then make the rename durable."""
        faults.point(tag + ".before_rename")
        os.replace(self.tmp, self.path)
        self.tmp = ""
        self.close()
        faults.point(tag + ".renamed")
        fsync_dir(os.path.dirname(self.path) or ".")
        faults.point(tag + ".dir_synced")

    def discard(self) -> None:
        """Remove the temp file if it was not published (an error before the rename)."""
        if self.tmp and os.path.exists(self.tmp):
            os.unlink(self.tmp)
        self.tmp = ""
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def stage(
    path: str, data: bytes, like: str | None = None, tag: str = "write", fresh: bool = False
) -> Staged:
    """Write `data` to a temp file in `path`'s directory, fsync it, give it the mode/owner of
    `like` (default: path). Nothing is visible at `path` until `Staged.publish`.

    `fresh`: a module vpatch adds to a package. It gets 0644 and the directory's owner, like
    the files pip installed next to it (a 0600 module would not import for other users)."""
    directory = os.path.dirname(path) or "."
    ref = like or path
    st = os.lstat(ref) if os.path.lexists(ref) else None
    fd, tmp = mkstemp(directory)
    staged = Staged(path, tmp, fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        write_all(fd, data)
        faults.point(tag + ".temp_written")
        os.fsync(fd)
        if st is not None:  # by descriptor: the directory's owner may rename our temp file
            os.fchmod(fd, st.st_mode & 0o7777)
            if os.geteuid() == 0:
                os.fchown(fd, st.st_uid, st.st_gid)
        elif fresh:
            os.chmod(tmp, 0o644)
            if os.geteuid() == 0:
                owner = os.stat(directory)
                os.fchown(fd, owner.st_uid, owner.st_gid)
        faults.point(tag + ".temp_synced")
    except BaseException:
        staged.discard()
        raise
    return staged


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written: a write may be short (a full disk, a file size
    limit) without raising; the next one then raises."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def sweep(directory: str, before: float, dir_fd: int | None = None) -> list[str]:
    """Remove our temp files that a killed writer left in `directory`; returns their paths.

    Ours: named `.vpatch-*.tmp`, regular files, last written before `before` (the start of the
    current run) and not flock'ed (a live writer holds the lock on its temp file until the
    rename). With `dir_fd` (the state dir's backups/), the directory is that descriptor, not
    whatever the name points to now. Best effort: what we cannot remove is left for next time."""
    removed: list[str] = []
    try:
        names = os.listdir(directory if dir_fd is None else dir_fd)
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)):
            continue
        where = name if dir_fd is not None else os.path.join(directory, name)
        try:
            st = os.stat(where, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_mtime >= before:
                continue
            fd = os.open(where, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0), dir_fd=dir_fd)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(where, dir_fd=dir_fd)
            removed.append(os.path.join(directory, name))
        except OSError:
            continue  # held by a live writer, or not ours to remove
        finally:
            os.close(fd)
    return removed


def refresh_bytecode(path: str) -> str:
    """Rewrite the interpreter's .pyc for `path` and drop other optimisation levels.

    Returns a short note for the report ("" when all went well). Failure to write bytecode is not
    fatal (Python recompiles from source when the .pyc is absent), but a stale .pyc that cannot be
    removed is reported.
    """
    notes = []
    cache = cache_from_source(path)
    for opt in ("", 1, 2):
        other = cache_from_source(path, optimization=opt)
        if other != cache and os.path.exists(other):
            try:
                os.unlink(other)
            except OSError as exc:
                notes.append("cannot remove stale %s: %s" % (other, exc.strerror))
    new_dir = not os.path.isdir(os.path.dirname(cache))
    try:
        write_bytecode(path, cache)
        if os.geteuid() == 0:  # through sudo: the env's owner must still be able to replace it
            st = os.lstat(path)  # lchown: a link swapped in by the dir's owner is not followed
            os.lchown(cache, st.st_uid, st.st_gid)
            if new_dir:
                os.lchown(os.path.dirname(cache), st.st_uid, st.st_gid)
    except (OSError, _CompileError) as exc:
        try:
            if os.path.exists(cache):
                os.unlink(cache)
        except OSError as exc2:
            notes.append("stale bytecode %s left: %s" % (cache, exc2.strerror))
        notes.append("bytecode not refreshed: %s" % exc)
    return "; ".join(notes)


_PYC_API = (
    "_code_to_timestamp_pyc",
    "_code_to_hash_pyc",
    "_calc_mode",
    "_write_atomic",
    "_RAW_MAGIC_NUMBER",
)


class _CompileError(Exception):
    """The file does not compile (py_compile's PyCompileError, worded the same)."""


def cache_from_source(path: str, optimization: object = None) -> str:
    """importlib.util.cache_from_source, without importing importlib.util (~4 ms)."""
    return str(_bootstrap.cache_from_source(path, optimization=optimization))


def write_bytecode(path: str, cfile: str) -> None:
    """What `py_compile.compile(path, cfile, doraise=True)` does with its default invalidation
    mode (checked-hash under SOURCE_DATE_EPOCH, else timestamp), with the same functions of the
    import system, so the same .pyc (tests/unit/test_agent_wire.py compares them); py_compile
    itself on an interpreter whose import system lacks one of them."""
    if not all(hasattr(_bootstrap, name) for name in _PYC_API):
        import py_compile

        try:
            mode = py_compile._get_default_invalidation_mode()  # honours SOURCE_DATE_EPOCH
            py_compile.compile(path, cfile=cfile, doraise=True, invalidation_mode=mode)
        except py_compile.PyCompileError as exc:
            raise _CompileError(str(exc)) from None
        return
    if os.path.islink(cfile):
        raise FileExistsError(
            "%s is a symlink and will be changed into a regular file if "
            "import writes a byte-compiled file to it" % cfile
        )
    if os.path.exists(cfile) and not os.path.isfile(cfile):
        raise FileExistsError(
            "%s is a non-regular file and will be changed into a regular one "
            "if import writes a byte-compiled file to it" % cfile
        )
    source = read_bytes(path)
    kept = _COMPILED.pop(path, None)
    if kept is not None and kept[0] == source:
        code = kept[1]  # compile_check compiled these very bytes for this path: same code
    else:
        try:
            code = compile(source, path, "exec", dont_inherit=True)
        except Exception as exc:
            raise _CompileError("Sorry: %s: %s" % (type(exc).__name__, exc)) from None
    try:
        os.makedirs(os.path.dirname(cfile))
    except FileExistsError:
        pass
    if os.environ.get("SOURCE_DATE_EPOCH"):
        import _imp

        digest = _imp.source_hash(_bootstrap._RAW_MAGIC_NUMBER, source)
        data = _bootstrap._code_to_hash_pyc(code, digest, True)
    else:
        st = os.stat(path)
        data = _bootstrap._code_to_timestamp_pyc(code, st.st_mtime, st.st_size)
    _bootstrap._write_atomic(cfile, data, _bootstrap._calc_mode(path))


# path -> (bytes, code) of the last successful compile_check: the commit writes those bytes
# there next, and its .pyc reuses the code (compiling a large module twice costs milliseconds).
# Taken by write_bytecode only when the file's bytes are these; cleared with every request.
_COMPILED: dict[str, tuple[bytes, Any]] = {}


def compile_check(data: bytes, path: str) -> str | None:
    """Syntax check on the TARGET interpreter (it may be older than the controller's)."""
    try:
        code = compile(data, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return "%s (line %s)" % (exc.msg, exc.lineno)
    except ValueError as exc:
        return str(exc)
    _COMPILED[path] = (data, code)
    return None
