"""File primitives for the agent (stdlib only, Python 3.9+): hashing, atomic writes, bytecode.

Why each step: a rename is the only write a crash cannot tear, so new bytes go to a temp file in
the same directory, are fsync'ed, get the old file's mode/owner, and replace it by rename; the
directory is fsync'ed so the rename itself survives power loss. Bytecode is refreshed right away
because a same-size edit within the same second as the old mtime leaves a timestamp .pyc that
CPython still trusts (CPython issue #75953). Every step happens inside a directory reached by
a descriptor walk (fdwalk.py): the temp file, its mode and owner, the rename, the bytecode.
"""

from __future__ import annotations

import fcntl
import os
import stat

from . import faults, fdwalk

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
SHA256: Any = _sha256  # the constructor, for hashed.py (many files, one digest each)

TEMP_PREFIX, TEMP_SUFFIX = fdwalk.TEMP_PREFIX, fdwalk.TEMP_SUFFIX
MAX_FILE_BYTES = 8 << 20  # a target file or a backup: ~40x vLLM's largest module
TooBig = fdwalk.TooBig
read_fd = fdwalk.read_fd


def sha256_bytes(data: bytes) -> str:
    digest: str = _sha256(data).hexdigest()
    return digest


def read_regular(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes, bounded: never through a final symlink (O_NOFOLLOW), never
    blocking on a FIFO (O_NONBLOCK), never reading a device or more than `limit` bytes. For
    files named by trusted configuration; what lies in the environment is read through a
    walk (fdwalk.Dir.read)."""
    fd = os.open(path, fdwalk.READ_FLAGS)
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


class Staged:
    """New bytes for `name` in directory `where`, in a locked temp file next to it, ready to
    be renamed over it; `st` is the temp file's stat once written (its mtime is the one the
    .pyc records: a rename keeps it).

    The temp file holds an flock for as long as this object lives, so `sweep` (run by the next
    commit) can tell the temp file of a live writer from one a killed writer left behind."""

    def __init__(self, where: fdwalk.Dir, name: str, tmp: str, fd: int, data: bytes) -> None:
        self.where, self.name, self.tmp, self.fd, self.data = where, name, tmp, fd, data
        self.st: os.stat_result | None = None

    @property
    def path(self) -> str:
        return self.where.join(self.name)

    def publish(self, tag: str = "write", sync: bool = True) -> None:
        """Rename over the target within the held directory, then make the rename durable
        (`sync` False: the caller fsyncs the directory once for all its renames)."""
        faults.point(tag + ".before_rename")
        self.ours()
        self.where.replace(self.tmp, self.name)
        self.tmp = ""
        self.close()
        faults.point(tag + ".renamed")
        if sync:
            self.where.fsync()
            faults.point(tag + ".dir_synced")

    def ours(self) -> None:
        """Unsafe unless the temp file's name still holds the file we wrote: the directory's
        owner may have swapped it (for a link to a root-only file), and the rename must not
        publish their entry as ours."""
        st, mine = self.where.lstat(self.tmp), os.fstat(self.fd)
        if st is None or (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
            raise fdwalk.Unsafe("had its temp file %s replaced meanwhile" % self.tmp, self.path)

    def discard(self) -> None:
        """Remove the temp file if it was not published (an error before the rename)."""
        if self.tmp:
            self.where.unlink(self.tmp)
        self.tmp = ""
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def stage(
    where: fdwalk.Dir,
    name: str,
    data: bytes,
    like: os.stat_result | None,
    tag: str = "write",
) -> Staged:
    """Write `data` to a temp file in `where`, fsync it, give it the mode/owner of `like` (the
    file it replaces). Nothing is visible at `name` until `Staged.publish`.

    `like` None: a module vpatch adds to a package. It gets 0644 and the directory's owner,
    like the files pip installed next to it (a 0600 module would not import for other users).
    Mode and owner are set on the temp file's descriptor, never by name: the directory's owner
    may swap the name for a link to any file meanwhile."""
    fd, tmp = where.create_temp()
    staged = Staged(where, name, tmp, fd, data)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        write_all(fd, data)
        faults.point(tag + ".temp_written")
        os.fsync(fd)
        ref = like if like is not None else where.st
        os.fchmod(fd, like.st_mode & 0o7777 if like is not None else 0o644)
        if os.geteuid() == 0:
            os.fchown(fd, ref.st_uid, ref.st_gid)
        staged.st = os.fstat(fd)
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


def sweep(where: fdwalk.Dir | int, before: float, path: str = "") -> list[str]:
    """Remove our temp files that a killed writer left in directory `where` (a walked package
    dir, or the descriptor of the state dir's backups/, named `path`); returns their paths.

    Ours: named `.vpatch-*.tmp`, regular files, last written before `before` (the start of the
    current run) and not flock'ed (a live writer holds the lock on its temp file until the
    rename). Best effort: what we cannot remove is left for next time."""
    removed: list[str] = []
    dir_fd = where if isinstance(where, int) else where.fd
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)):
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_mtime >= before:
                continue
            fd = os.open(name, fdwalk.READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(name, dir_fd=dir_fd)
            removed.append(os.path.join(path, name) if isinstance(where, int) else where.join(name))
        except OSError:
            continue  # held by a live writer, or not ours to remove
        finally:
            os.close(fd)
    return removed


PYCACHE = "__pycache__"


def _pyc_names(path: str) -> tuple[str, list[str]]:
    """The interpreter's .pyc name for `path` and those of the other optimisation levels."""
    cache = os.path.basename(cache_from_source(path))
    others = [os.path.basename(cache_from_source(path, optimization=o)) for o in ("", 1, 2)]
    return cache, [o for o in others if o != cache]


def refresh_bytecode(where: fdwalk.Dir, item: Staged) -> str:
    """Rewrite the interpreter's .pyc for the file `item` just published in `where` and drop
    the other optimisation levels, all inside `where`/__pycache__ opened without following a
    link (a `__pycache__` linked to the stdlib's made root replace and chown its bytecode).

    Returns a short note for the report ("" when all went well). Failure to write bytecode is not
    fatal (Python recompiles from source when the .pyc is absent), but a stale .pyc that cannot be
    removed is reported.
    """
    assert item.st is not None
    path = item.path
    cache, others = _pyc_names(path)
    owner = item.st if os.geteuid() == 0 else None  # through sudo: the env's owner keeps it
    try:
        existed = where.lstat(PYCACHE) is not None
        cdir = where.walk([PYCACHE], mode=0o777)
    except OSError as exc:
        return "bytecode not refreshed: %s: it %s" % (
            where.join(PYCACHE),
            getattr(exc, "why", None) or exc.strerror,
        )
    notes = []
    try:
        if not existed and owner is not None:
            os.fchown(cdir.fd, owner.st_uid, owner.st_gid)
        for other in others:
            try:
                cdir.unlink(other)
            except OSError as exc:
                notes.append("cannot remove stale %s: %s" % (cdir.join(other), exc.strerror))
        try:
            data = pyc_bytes(item.data, path, item.st)
            write_pyc(cdir, cache, data, item.st, owner)
        except (OSError, _CompileError) as exc:
            try:
                cdir.unlink(cache)
            except OSError as exc2:
                notes.append("stale bytecode %s left: %s" % (cdir.join(cache), exc2.strerror))
            notes.append("bytecode not refreshed: %s" % exc)
    finally:
        cdir.close()
    return "; ".join(notes)


def drop_bytecode(where: fdwalk.Dir, path: str) -> None:
    """Remove every .pyc of `path` (a file vpatch removed) from `where`/__pycache__, reached
    without following a link; nothing when there is none."""
    try:
        cdir = where.walk([PYCACHE])
    except OSError:
        return
    with cdir:
        cache, others = _pyc_names(path)
        for name in [cache, *others]:
            cdir.unlink(name)


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
    itself on an interpreter whose import system lacks one of them. By name, for paths the
    caller trusts; the commit writes bytecode through `refresh_bytecode`."""
    fd = os.open(path, fdwalk.READ_FLAGS)
    try:
        source, st = read_fd(fd, MAX_FILE_BYTES, path), os.fstat(fd)
    finally:
        os.close(fd)
    data = pyc_bytes(source, path, st)
    with fdwalk.open_dir(os.path.dirname(cfile) or ".") as cdir:
        write_pyc(cdir, os.path.basename(cfile), data, st, None)


def pyc_bytes(source: bytes, path: str, st: os.stat_result) -> bytes:
    """The .pyc for `source` (the bytes of `path`, whose stat is `st`), as py_compile makes it."""
    if not all(hasattr(_bootstrap, name) for name in _PYC_API):
        return _py_compile_bytes(source, path, st)
    kept = _COMPILED.pop(path, None)
    if kept is not None and kept[0] == source:
        code = kept[1]  # compile_check compiled these very bytes for this path: same code
    else:
        try:
            code = compile(source, path, "exec", dont_inherit=True)
        except Exception as exc:
            raise _CompileError("Sorry: %s: %s" % (type(exc).__name__, exc)) from None
    if os.environ.get("SOURCE_DATE_EPOCH"):
        import _imp

        digest = _imp.source_hash(_bootstrap._RAW_MAGIC_NUMBER, source)
        data: bytes = _bootstrap._code_to_hash_pyc(code, digest, True)
    else:
        data = _bootstrap._code_to_timestamp_pyc(code, st.st_mtime, st.st_size)
    return bytes(data)


def _py_compile_bytes(source: bytes, path: str, st: os.stat_result) -> bytes:
    """py_compile's own .pyc, for an import system without the private helpers: compiled from
    a private copy of the source (py_compile works by name), read back."""
    import py_compile
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "m.py"), os.path.join(tmp, "m.pyc")
        with open(src, "wb") as fh:
            fh.write(source)
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # the .pyc records the source's
        try:
            mode = py_compile._get_default_invalidation_mode()  # honours SOURCE_DATE_EPOCH
            py_compile.compile(src, cfile=out, dfile=path, doraise=True, invalidation_mode=mode)
        except py_compile.PyCompileError as exc:
            raise _CompileError(str(exc)) from None
        with open(out, "rb") as fh:
            return fh.read()


def write_pyc(
    cdir: fdwalk.Dir, name: str, data: bytes, src: os.stat_result, owner: os.stat_result | None
) -> None:
    """`data` as `name` in the open cache dir, atomically (a temp file there, renamed), with
    the mode the import system gives a .pyc (the source's, writable by its owner; the umask
    applies) and, for root, the source's owner, set on the descriptor. A link or a non-regular
    file at `name` is refused, as py_compile refuses it."""
    st = cdir.lstat(name)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise FileExistsError(
            "%s is a symlink and will be changed into a regular file if "
            "import writes a byte-compiled file to it" % cdir.join(name)
        )
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise FileExistsError(
            "%s is a non-regular file and will be changed into a regular one "
            "if import writes a byte-compiled file to it" % cdir.join(name)
        )
    fd, tmp = cdir.create_temp((src.st_mode | 0o200) & 0o666)
    try:
        try:
            if owner is not None:
                os.fchown(fd, owner.st_uid, owner.st_gid)
            write_all(fd, data)
        finally:
            os.close(fd)
        cdir.replace(tmp, name)
    except BaseException:
        try:
            cdir.unlink(tmp)
        except OSError:
            pass
        raise


# path -> (bytes, code) of the last successful compile_check: the commit writes those bytes
# there next, and its .pyc reuses the code (compiling a large module twice costs milliseconds).
# Taken by pyc_bytes only when the file's bytes are these; cleared with every request.
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
