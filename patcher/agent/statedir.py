"""vpatch's state on the host (`<prefix>/.vpatch/` or --state-dir), reached without following links.

Why: vpatch runs as root (or through --sudo) on environments other users own, and the owner of
an environment can put anything in its `.vpatch/`. A symlink named `backups` pointing at a
root-only directory made root write backups there and chown its entries to the owner; a
symlinked journal or lock made root append to, or create, any file. So the state dir is reached
through descriptors: its parent (named by the operator with --state-dir, or the environment's
own prefix, by its real path) is walked to from "/" following only root's and vpatch's own
user's links (`open_dir`), the state dir and everything below it relative to its
directory's descriptor with O_NOFOLLOW, and each entry is checked on the descriptor itself
(fstat: type, owner, hard links), so nothing can be swapped between the check and the use.
What fails is refused, naming the path and what to check (agent error kind `state`); nothing
in it is then read, written, chowned or followed.

Owners accepted: the user vpatch runs as, root and, when vpatch runs as root, the owner of the
environment (`adopt` gives it the state, so a later run without sudo still works). A regular
file must have one link: a hard link to a file elsewhere would be written through.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from . import faults, fsops, protocol

# Annotations only (no `typing` at run time: importing it costs the agent ~4 ms per start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Agent error kind (the `kind` of an {"ok": false} answer): the state dir, or an entry in it, is
# a symlink, not a directory/regular file, owned by someone else, or hard-linked elsewhere.
KIND_STATE = protocol.STATE

JOURNAL, LOCK, BACKUPS = "journal.jsonl", "lock", "backups"
MAX_JOURNAL_BYTES = 64 << 20  # ~100,000 commits' worth; more is not a journal vpatch wrote
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | _CLOEXEC
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW
_HINT = "check who made it, and move it away"


def is_sha256(name: str) -> bool:
    """64 lowercase hex digits (a backup's name); without `re`, which the agent does not import."""
    return len(name) == 64 and not name.strip("0123456789abcdef")


class StateError(protocol.Refused):
    """The state dir cannot be used safely; the message names the path."""

    def __init__(self, message: str) -> None:
        super().__init__(message, KIND_STATE)


def owners() -> set[int]:
    """Who may own the state dir and its entries (see module docstring)."""
    out = {os.geteuid(), 0}
    if os.geteuid() == 0:
        try:
            out.add(os.stat(sys.prefix).st_uid)
        except OSError:
            pass
    return out


def _refuse(path: str, what: str) -> StateError:
    return StateError("unsafe vpatch state: %s %s; %s" % (path, what, _HINT))


def _check(st: os.stat_result, path: str, want_dir: bool) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symlink (vpatch follows no links in its state dir)")
    if want_dir and not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is not a directory")
    if not want_dir and not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is not a regular file")
    if st.st_uid not in owners():
        raise _refuse(path, "is owned by uid %d, not by the user vpatch runs as" % st.st_uid)
    if not want_dir and st.st_nlink > 1:
        raise _refuse(path, "has %d hard links (vpatch writes only its own files)" % st.st_nlink)


def _os_error(exc: OSError, path: str) -> Exception:
    """The same error, naming the whole path (a dir_fd-relative call names only the entry)."""
    if exc.errno == errno.ELOOP:  # a link appeared between our lstat and open
        return _refuse(path, "is a symlink (vpatch follows no links in its state dir)")
    return OSError(exc.errno, exc.strerror, path)


def open_entry(
    dfd: int, name: str, path: str, want_dir: bool, create: bool = False, flags: int = 0
) -> tuple[int, bool]:
    """(descriptor, created) of `name` in directory `dfd`, opened without following a link and
    checked on the descriptor. Created 0700/0600 (whatever the umask) when `create`; raises
    FileNotFoundError when absent and not `create`."""
    created = False
    try:
        try:
            _check(os.stat(name, dir_fd=dfd, follow_symlinks=False), path, want_dir)
        except FileNotFoundError:
            if not create:
                raise
            if want_dir:
                # 0700 whatever the umask: the owner (privsep's worker) must open what it made
                mask = os.umask(0o077)
                try:
                    os.mkdir(name, 0o700, dir_fd=dfd)
                    created = True
                except FileExistsError:
                    pass
                finally:
                    os.umask(mask)
        if want_dir:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
        else:
            base = flags | _NOFOLLOW | os.O_NONBLOCK  # a FIFO swapped in must not block us
            excl = os.O_CREAT | os.O_EXCL if create else 0
            try:
                fd = os.open(name, base | excl, 0o600, dir_fd=dfd)
                created = create
            except FileExistsError:
                fd = os.open(name, base, dir_fd=dfd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _os_error(exc, path) from None
    try:
        _check(os.fstat(fd), path, want_dir)
        if created:
            os.fchmod(fd, 0o700 if want_dir else 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd, created


# The steps of `replace_entry`, in order: a caller that names its fault points (compact's
# `compact.temp_written`, ...) passes them under its own prefix (faults.py).
REPLACE_STEPS = ("temp_written", "temp_synced", "renamed", "dir_synced")


def replace_entry(
    dfd: int, name: str, data: bytes, owner: tuple[int, int] | None = None, points: str = ""
) -> None:
    """`data` becomes entry `name` of directory `dfd` whole, or the old entry stays: a temp
    file created O_EXCL|O_NOFOLLOW in `dfd` (never one that was there, never through a link),
    0600, given to `owner` (uid, gid) when root writes it, written, fsync'ed and closed, then
    renamed over `name` and `dfd` fsync'ed: all by descriptor, the rename by names in `dfd`
    (a link planted at `name` is replaced, never followed). A failure before the rename
    removes the temp file; a kill leaves it for the next `fsops.sweep`, and the old entry in
    place. `points`: the prefix of the fault points passed (REPLACE_STEPS), "" for none. The
    one writer of a state file replaced whole (the journal compacted, the rollout lease)."""
    tmp = fsops.TEMP_PREFIX + os.urandom(8).hex() + fsops.TEMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=dfd)
    try:
        try:
            os.fchmod(fd, 0o600)
            if owner is not None and os.geteuid() == 0 and owner != (0, 0):
                os.fchown(fd, owner[0], owner[1])
            fsops.write_all(fd, data)
            _step(points, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        _step(points, 1)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    _step(points, 2)
    os.fsync(dfd)
    _step(points, 3)


def _step(points: str, i: int) -> None:
    if points:
        faults.point(points + "." + REPLACE_STEPS[i])


MAX_LINKS = 40  # the kernel's own limit on links in one lookup


def open_dir(path: str, create: bool = False) -> int:
    """Descriptor of the directory at absolute `path`, walked from "/" one component at a
    time (O_NOFOLLOW|O_DIRECTORY) and created 0700 where missing when `create` (os.makedirs
    gives intermediate dirs 0777 & ~umask: world-writable under umask 000).

    A symlink on the way is followed only when root or the user vpatch runs as owns it: the
    operator's own links (`/var/lib -> /data/lib`) work, but a link the environment's owner
    planted (`--state-dir ~owner/link/state`, link -> a root-only dir) is refused, so root
    never creates, and then chowns to that owner, a directory where the owner could not."""
    names = [p for p in path.split("/") if p]
    fd = os.open("/", _DIR_FLAGS)
    where, hops = "/", 0
    try:
        while names:
            name = names.pop(0)
            where = os.path.normpath(os.path.join(where, name))
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    if not create:
                        raise FileNotFoundError(exc.errno, exc.strerror, where) from None
                    os.close(open_entry(fd, name, where, want_dir=True, create=True)[0])
                    names.insert(0, name)
                    where = os.path.dirname(where)
                    continue
                if stat.S_ISDIR(st.st_mode):
                    raise OSError(exc.errno, exc.strerror, where) from None
                if not stat.S_ISLNK(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, "Not a directory", where) from None
                hops += 1
                if st.st_uid not in (0, os.geteuid()) or hops > MAX_LINKS:
                    raise _refuse(
                        where,
                        "is a symlink owned by uid %d (vpatch follows only root's "
                        "and its own user's links to its state dir)" % st.st_uid,
                    ) from None
                target = os.readlink(name, dir_fd=fd)
                names[:0] = [p for p in target.split("/") if p]
                where = os.path.dirname(where)
                if target.startswith("/"):
                    os.close(fd)
                    fd, where = -1, "/"
                    fd = os.open("/", _DIR_FLAGS)  # (fd -1 meanwhile: nothing to close)
                continue
            os.close(fd)
            fd = nfd
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd


class State:
    """An open state dir: its descriptor, backups/ on demand, and what this run created."""

    def __init__(self, path: str, fd: int, created: bool) -> None:
        self.path, self.fd = path, fd
        self._backups = -1
        self._unsynced = False  # a backup renamed into backups/ that no fsync covers yet
        self.made: list[tuple[str, ...]] = [()] if created else []  # relative names we created

    def close(self) -> None:
        for fd in (self._backups, self.fd):
            if fd >= 0:
                os.close(fd)
        self._backups = self.fd = -1

    def __enter__(self) -> State:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def sub(self, *names: str) -> str:
        return os.path.join(self.path, *names)

    def backups(self, create: bool = False) -> int:
        """Descriptor of backups/ (-1 when it does not exist and not `create`)."""
        if self._backups < 0:
            try:
                self._backups, made = open_entry(
                    self.fd, BACKUPS, self.sub(BACKUPS), want_dir=True, create=create
                )
            except FileNotFoundError:
                return -1
            if made:
                self.made.append((BACKUPS,))
        return self._backups

    def open_file(self, name: str, flags: int, create: bool = False) -> int:
        fd, made = open_entry(self.fd, name, self.sub(name), False, create, flags)
        if made:
            self.made.append((name,))
        return fd

    def read_journal(self) -> bytes:
        """The journal's bytes (b"" when there is none), at most MAX_JOURNAL_BYTES."""
        try:
            fd = self.open_file(JOURNAL, os.O_RDONLY)
        except FileNotFoundError:
            return b""
        try:
            return fsops.read_fd(fd, MAX_JOURNAL_BYTES, self.sub(JOURNAL))
        except fsops.TooBig:
            # Not a permissions problem (an OSError would be answered as one, with --sudo as
            # the hint, by every command): compaction keeps vpatch's own journal far below.
            raise _refuse(
                self.sub(JOURNAL),
                "is over the %d MiB a vpatch journal reaches" % (MAX_JOURNAL_BYTES >> 20),
            ) from None
        finally:
            os.close(fd)

    def read_backup(self, sha: str) -> bytes | None:
        """The backup with that sha256, verified; None when absent. A backup whose bytes do not
        hash to its name raises ValueError: restoring it would write someone else's bytes."""
        dfd = self.backups()
        if not is_sha256(sha) or dfd < 0:
            return None
        path = self.sub(BACKUPS, sha)
        try:
            fd, _ = open_entry(dfd, sha, path, want_dir=False, flags=os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            data = fsops.read_fd(fd, fsops.MAX_FILE_BYTES, path)
        finally:
            os.close(fd)
        if fsops.sha256_bytes(data) != sha:
            raise ValueError("backup %s is corrupt (its bytes no longer hash to its name)" % sha)
        return data

    def write_backup(self, data: bytes, sha: str, sync: bool = True) -> None:
        """Content-addressed, written once, durable (file and directory fsync'ed) before the
        journal that refers to it is written. A corrupt backup of that name is replaced.
        `sync` False: the caller makes the renames durable with one `sync_backups` for all
        the backups of a transaction, before its journal entries."""
        dfd = self.backups(create=True)
        try:
            if self.read_backup(sha) is not None:
                return
        except ValueError:
            pass
        tmp = fsops.TEMP_PREFIX + os.urandom(8).hex() + fsops.TEMP_SUFFIX
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            try:
                os.fchmod(fd, 0o600)
                fsops.write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            faults.point("backup.temp_written")
            os.replace(tmp, sha, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        self.made.append((BACKUPS, sha))
        self._unsynced = True
        if sync:
            self.sync_backups()
        faults.point("backup.written")

    def sync_backups(self) -> None:
        """fsync backups/ once if a backup was renamed into it since the last sync."""
        if self._unsynced:
            os.fsync(self.backups())
            self._unsynced = False

    def adopt(self) -> None:
        """Give what THIS run created the environment's owner (only root can, and only root
        needs to): by descriptor, never through a link, nothing that was already there."""
        if os.geteuid() != 0:
            return
        try:
            env = os.stat(sys.prefix)
        except OSError:
            return
        for names in self.made:
            try:
                if not names:
                    fd = os.dup(self.fd)
                elif names == (BACKUPS,):
                    fd = os.dup(self.backups())
                elif len(names) == 1:
                    fd = os.open(names[0], os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK, dir_fd=self.fd)
                else:
                    fd = os.open(
                        names[1], os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK, dir_fd=self.backups()
                    )
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                ok = stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)
                if ok and st.st_uid == 0 and (st.st_uid, st.st_gid) != (env.st_uid, env.st_gid):
                    os.fchown(fd, env.st_uid, env.st_gid)
            except OSError:
                pass
            finally:
                os.close(fd)


def open_state(path: str, create: bool = False) -> State | None:
    """The state dir at `path`, checked; None when it does not exist (or is not a directory,
    which only a write must refuse: inspect reports it as unwritable) and not `create`."""
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    if not name:
        raise _refuse(path, "cannot be a state dir")
    if parent == os.path.abspath(sys.prefix):  # the default: the interpreter's own prefix
        parent = os.path.realpath(parent)
    try:
        pfd = open_dir(parent, create=create)
    except (FileNotFoundError, NotADirectoryError):
        if create:
            raise
        return None
    try:
        fd, created = open_entry(pfd, name, path, want_dir=True, create=create)
    except FileNotFoundError:
        return None
    except StateError:
        if not create and _plain_non_dir(pfd, name):
            return None
        raise
    finally:
        os.close(pfd)
    return State(path, fd, created)


def _plain_non_dir(pfd: int, name: str) -> bool:
    try:
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except OSError:
        return False
    return not stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode)
