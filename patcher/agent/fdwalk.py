"""Paths inside the environment, reached only through directory descriptors (stdlib, 3.9+).

Why: the agent acts, often as root, in a tree someone else owns, and that owner can swap any
directory for a symlink, a file for a FIFO or a hard link to a root-only file, at any moment.
Checked by name and then used by name, each check is a race the owner can win (a `__pycache__`
link made root write and chown stdlib bytecode; a package dir swapped between a repair's check
and its write made root write into a root-only dir). So this module is the one way the agent
opens anything in the environment, and there is no check apart from the use:

- a root (a real path: confine.roots()) is opened from "/" one component at a time, and every
  directory below it relative to its parent's descriptor, each with O_NOFOLLOW|O_DIRECTORY: a
  component that is a link (or not a directory) NOW fails the walk itself;
- a file is opened relative to its directory's descriptor with O_NOFOLLOW|O_NONBLOCK (a FIFO
  must not block the open) and checked on its own descriptor before one byte is read: a
  regular file, and one link unless it belongs to its directory's owner (a hard link to
  `/etc/shadow` in a user's package dir belongs to root); reads are bounded;
- writes happen inside the held directory: a temp file created O_EXCL there, fchmod/fchown on
  its descriptor, renamed and unlinked by (directory descriptor, name).

A directory reached this way may be renamed by its owner while we hold it; what we write then
lands in that same directory object, which the owner could write anyway: no more power than
the owner's. What the walk refuses raises `Unsafe` (an OSError), phrased to follow "it".
"""

from __future__ import annotations

import errno
import os
import stat

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW | _CLOEXEC
READ_FLAGS = os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
TEMP_PREFIX, TEMP_SUFFIX = ".vpatch-", ".tmp"


class Unsafe(OSError):
    """The walk refuses this path: a symlink, a non-directory component, a file that is not
    regular or is hard-linked from elsewhere. `why` reads after "it" ("goes through a ...")."""

    def __init__(self, why: str, path: str) -> None:
        super().__init__(errno.EPERM, why, path)
        self.why = why


class TooBig(OSError):
    """A file is larger than vpatch reads (a journaled /dev/zero, a 10 GB file)."""


def parts(rel: str) -> list[str]:
    """The components of a '/'-separated relative path; Unsafe for '', '.' or '..' anywhere (a
    RECORD line `pkg/../../../../etc/x` names a file outside its distribution)."""
    out = rel.split("/")
    for p in out:
        if p in ("", ".", "..") or "\0" in p:
            raise Unsafe("is not a plain relative path (has '', '.' or '..')", rel)
    return out


def _refusal(dfd: int, name: str, where: str, exc: OSError) -> OSError:
    """What an openat of a directory component that failed met there, as Unsafe when it is
    a link or not a directory (Linux gives ENOTDIR or ELOOP for a link: the lstat decides)."""
    if exc.errno == errno.ENOENT:
        return FileNotFoundError(errno.ENOENT, "No such file or directory", where)
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return OSError(exc.errno, exc.strerror, where)
    if stat.S_ISLNK(st.st_mode):
        return Unsafe("goes through a symlink (%s)" % where, where)
    if not stat.S_ISDIR(st.st_mode):
        return Unsafe("has a non-directory component (%s)" % where, where)
    return OSError(exc.errno, exc.strerror, where)


def _down(fd: int, where: str, names: list[str], mode: int | None) -> tuple[int, str]:
    """Walk from the open directory `fd` (consumed) through `names`; `mode`: create what is
    missing with that mode (the umask applies, as for os.makedirs)."""
    try:
        for name in names:
            where = os.path.join(where, name)
            try:
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno != errno.ENOENT or mode is None:
                    raise _refusal(fd, name, where, exc) from None
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                except FileExistsError:
                    pass
                try:
                    nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError as exc2:
                    raise _refusal(fd, name, where, exc2) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, where


class Dir:
    """An open directory reached by a walk; every entry is used relative to it."""

    __slots__ = ("fd", "path", "st")

    def __init__(self, fd: int, path: str) -> None:
        self.fd, self.path = fd, path
        self.st = os.fstat(fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def join(self, name: str) -> str:
        return os.path.join(self.path, name)

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry's own stat (a link is not followed); None when it does not exist."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def walk(self, names: list[str], mode: int | None = None) -> Dir:
        """The directory `names` below this one (created with `mode` where missing)."""
        fd, where = _down(os.dup(self.fd), self.path, names, mode)
        return Dir(fd, where)

    def listdir(self) -> list[str]:
        return os.listdir(self.fd)

    def open_file(self, name: str, flags: int = 0) -> int:
        """A descriptor of the regular file `name`, checked on the descriptor (`check`)."""
        return self.open_checked(name, flags)[0]

    def open_checked(self, name: str, flags: int = 0) -> tuple[int, os.stat_result]:
        """open_file, and the stat it checked (a reader needs no second fstat)."""
        try:
            fd = os.open(name, READ_FLAGS | flags, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Unsafe("is a symlink", self.join(name)) from None
            raise OSError(exc.errno, exc.strerror, self.join(name)) from None
        try:
            st = os.fstat(fd)
            self.check(st, name)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def check(self, st: os.stat_result, name: str) -> None:
        """Unsafe unless `st` is a regular file that is not a hard link from elsewhere: one
        link, or owned by this directory's owner (whose file it then is anyway)."""
        if not stat.S_ISREG(st.st_mode):
            raise Unsafe("is not a regular file", self.join(name))
        if st.st_nlink > 1 and st.st_uid != self.st.st_uid:
            raise Unsafe(
                "has %d hard links and belongs to uid %d, not to its directory's owner (uid %d)"
                % (st.st_nlink, st.st_uid, self.st.st_uid),
                self.join(name),
            )

    def read(self, name: str, limit: int) -> tuple[bytes, os.stat_result]:
        """The regular file's bytes (at most `limit`: TooBig beyond) and its stat."""
        fd, st = self.open_checked(name)
        try:
            return read_fd(fd, limit, self.join(name), st), st
        finally:
            os.close(fd)

    def create_temp(self, mode: int = 0o600) -> tuple[int, str]:
        """A new, empty `.vpatch-*.tmp` file here, opened for writing, and its name."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW | _CLOEXEC
        for _ in range(100):
            name = TEMP_PREFIX + os.urandom(8).hex() + TEMP_SUFFIX
            try:
                return os.open(name, flags, mode, dir_fd=self.fd), name
            except FileExistsError:
                continue
        raise FileExistsError("no free temporary name in %s" % self.path)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink(self, name: str) -> bool:
        """Remove the entry (never a directory; a link is removed, not followed); False when
        it was not there."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def fsync(self) -> None:
        os.fsync(self.fd)


def read_fd(fd: int, limit: int, path: str, st: os.stat_result | None = None) -> bytes:
    """At most `limit` bytes of an open regular file (`st`: its fstat, when the caller has
    it); TooBig beyond that. One read asks for one byte more than the file's size: getting
    exactly the size is the whole file (a regular file reads short only at its end), so the
    common case is one system call; a file that grew or read short is read on to its end."""
    if st is None:
        st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(0, "not a regular file", path)
    if st.st_size > limit:
        raise TooBig(0, "larger than %d bytes (%d)" % (limit, st.st_size), path)
    first = os.read(fd, st.st_size + 1)
    if len(first) == st.st_size:
        return first
    chunks = [first]
    size = len(first)
    while first:
        if size > limit:
            raise TooBig(0, "larger than %d bytes" % limit, path)
        first = os.read(fd, min(1 << 20, limit + 1 - size))
        chunks.append(first)
        size += len(first)
    return b"".join(chunks)


def open_root(real: str) -> Dir:
    """The directory at `real`, a real path (no link in it, as realpath gives), walked from
    "/" so that a component swapped for a link since is refused."""
    return Dir(*_down(os.open("/", DIR_FLAGS), "/", [p for p in real.split("/") if p], None))


def open_dir(path: str) -> Dir:
    """A directory named by trusted configuration (sys.path, the interpreter's own dirs),
    opened as named: links in `path` are the configuration's, not the environment owner's
    doing. What lies below it is reached with `Dir.walk`."""
    try:
        fd = os.open(path, DIR_FLAGS & ~NOFOLLOW)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None
    return Dir(fd, path)


def reach(root: Dir, rel: list[str]) -> tuple[Dir, str]:
    """(the directory holding rel's last component, that name), walked from `root`."""
    return root.walk(rel[:-1]), rel[-1]
