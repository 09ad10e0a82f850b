"""What the wheels room trusts on disk: directories and files that are the user's own (or
root's) and not writable by group or others, opened without following links and checked on
the open descriptor; writes that land whole or not at all.

The store and the matrix's cache hold pristine bytes vpatch compares a host's files with: a
poisoned entry would hide a host's edit (issue 24), so an entry anyone else could have written
is refused (`UnsafeStore`, with a hint), never used.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import IO

from patcher.errors import VpatchError
from patcher.output.inert import clean

CHUNK = 1 << 20  # bytes read at a time from a wheel (a vLLM wheel is 300-500 MB)


class UnsafeStore(VpatchError):
    """The store (or an entry) could be written by someone else: it is not used."""


def check_stat(st: os.stat_result, what: Path, kind: str) -> None:
    """None when `st` is the user's own (root's is trusted too), of `kind` ("dir" or "file")
    and not writable by group or others; UnsafeStore (with a hint) otherwise."""
    if kind == "dir" and not stat.S_ISDIR(st.st_mode):
        raise UnsafeStore(f"{what}: not a directory", STORE_HINT)
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        raise UnsafeStore(f"{what}: not a regular file", STORE_HINT)
    if st.st_uid not in (os.geteuid(), 0):
        raise UnsafeStore(f"{what}: owned by uid {st.st_uid}, not by this user", STORE_HINT)
    if st.st_mode & 0o022:
        raise UnsafeStore(
            f"{what}: writable by group or others (mode {stat.S_IMODE(st.st_mode):o})",
            STORE_HINT,
        )


STORE_HINT = (
    "the wheel store must be yours and not group/other-writable: fix it, or set "
    "VPATCH_WHEEL_STORE to a directory of your own"
)


def safe_dir(path: Path, create: bool = False) -> Path:
    """`path`, a directory checked like `check_stat` (made 0700 first when `create`)."""
    if create:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_stat(os.lstat(path), path, "dir")
    return path


def open_checked(path: Path) -> tuple[IO[bytes], os.stat_result]:
    """(file, its stat): opened without following a link; the descriptor's own stat is what
    is checked."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    fh = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fd)
        check_stat(st, path, "file")
    except BaseException:
        fh.close()
        raise
    return fh, st


SOURCE_HINT = (
    "wheels vpatch reads pristine bytes from, and their directory, must be yours (or root's) "
    "and not writable by group or others"
)


def _source_problem(st: os.stat_result) -> str | None:
    from patcher.specs.catalog import writer_problem  # the rule specs and inventories share

    return writer_problem(st)


def open_source(path: Path) -> tuple[IO[bytes], os.stat_result]:
    """(file, its stat) of a wheelhouse wheel: a regular file that only the invoking user or
    root owns and can change, in a directory of the same kind (whoever may write the directory
    may put another wheel under the name). The file is checked on its open descriptor; its
    directory is the one of the file's real path."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO must not hang us
    fh = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fd)
        shown = clean(str(path))
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeStore(f"{shown}: not a regular file", SOURCE_HINT)
        why = _source_problem(st)
        if why is not None:
            raise UnsafeStore(f"{shown}: {why}, refused", SOURCE_HINT)
        proc = f"/proc/self/fd/{fd}"  # the opened file's own path (Linux); else the name's
        real = os.readlink(proc) if os.path.exists(proc) else os.path.realpath(path)
        parent = Path(real).parent
        why = _source_problem(os.stat(parent))
        if why is not None:
            raise UnsafeStore(f"{shown}: its directory {clean(str(parent))} is {why}", SOURCE_HINT)
    except BaseException:
        fh.close()
        raise
    return fh, st


def stamp(st: os.stat_result) -> list[int]:
    """What any write to a file changes: inode, size, mtime and ctime."""
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def hash_file(fh: IO[bytes]) -> str:
    """The sha256 (hex) of an open file's bytes, read in chunks; the file is left at 0."""
    h = hashlib.sha256()
    fh.seek(0)
    while chunk := fh.read(CHUNK):
        h.update(chunk)
    fh.seek(0)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Nothing; `path` holds `data` whole (written to a temp file, synced, renamed: never
    through a planted name, patcher.safewrite); a planted name is UnsafeStore."""
    from patcher import safewrite

    try:
        safewrite.write(path, data, "the wheel store's", 0o600)
    except safewrite.Refused as exc:
        raise UnsafeStore(exc.message, STORE_HINT) from None


def cache_dir(variable: str, sub: str) -> Path:
    """The cache root: $variable, else $XDG_CACHE_HOME/vpatch/sub, else ~/.cache/vpatch/sub."""
    configured = os.environ.get(variable)
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "vpatch" / sub
