"""Every file the controller writes where others may write (`--report FILE`, the rollout's live
report, `-o` of capture, `wheel` and `backport`, the caches' files): one way to write it.

Why: these paths are the operator's choice, often a shared directory (`/tmp`, a team's report
dir), and the controller often runs as root. A plain `open(path + ".tmp-PID", "w")` follows a
link planted under that predictable name and truncates whatever it points to, as root. So:

- the directory is opened once; every step after is relative to that descriptor;
- the new bytes go to a temp file of a random name created there with
  `O_CREAT|O_EXCL|O_NOFOLLOW` (never an existing name, never through a link), checked on its
  descriptor (a regular file of ours, one link), written, fsync'ed, then renamed over the name;
- an existing entry under the name must be a regular file of the user vpatch runs as, with one
  link: a symlink, a FIFO, a directory, another user's file or a hard link someone planted
  there is refused with an `error:`/`hint:` (exit 2) and nothing is written. It is checked
  before any work (`check`, so a command refuses before it contacts a host) and again just
  before the rename (`rename` replaces a link swapped in after that check: it never writes
  through it).

The file's mode is what `open()` gives (`mode` masked by the umask) unless a caller asks for
less (the caches: 0600).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from patcher.errors import UsageError

_HINT = "remove it (or pick another path); vpatch writes only a file of its own there"
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(UsageError):
    """The target name holds something vpatch will not replace: nothing was written."""


def _split(path: str | Path) -> tuple[str, str]:
    head, name = os.path.split(os.fspath(path))
    if name in ("", ".", ".."):
        raise Refused(f"{path}: not a file name", "name a file, e.g. out/report.json")
    return head or ".", name


def _problem(st: os.stat_result) -> str | None:
    """Why an existing entry may not be replaced, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by uid {os.geteuid()} that vpatch runs as"
    if st.st_nlink != 1:
        return f"has {st.st_nlink} hard links"
    return None


def _check_at(dfd: int, name: str, shown: str, what: str) -> None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    why = _problem(st)
    if why is not None:
        raise Refused(f"{what} {shown}: {why}; refused, nothing written through it", _HINT)


def _open_dir(head: str, shown: str, what: str) -> int:
    try:
        return os.open(head, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(
            f"{what} {shown}: cannot open its directory: {exc.strerror or exc}",
            "give a path in a directory you can write",
        ) from None


def check(path: str | Path, what: str = "--report") -> None:
    """Refuse now (exit 2) what `write` would refuse later: an existing entry that is not a
    file of ours, or a directory that cannot be opened (a command checks before its hosts;
    a rollout makes its report's directory itself, then writes)."""
    head, name = _split(path)
    dfd = _open_dir(head, str(path), what)
    try:
        _check_at(dfd, name, str(path), what)
    finally:
        os.close(dfd)


def write(
    path: str | Path,
    data: bytes | str,
    what: str = "--report",
    mode: int = 0o666,
    sync: bool = True,
) -> None:
    """`data` as the whole content of `path`, atomically, never through a link (above).
    Refused (exit 2) on a planted entry; OSError on a failing disk. `sync=False` for a cache
    (whole or absent is all it needs; a lost entry is a miss). The temp file's name starts
    with `.tmp-`, which the caches' prunes remove when a killed run left one."""
    shown = str(path)
    head, name = _split(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    dfd = _open_dir(head, shown, what)
    tmp = ""  # set once the temp file is ours: only then is it removed on a failure
    try:
        _check_at(dfd, name, shown, what)
        tmp, fd = _temp(dfd, shown, what, mode)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        _check_at(dfd, name, shown, what)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        tmp = ""
    finally:
        if tmp:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
        os.close(dfd)


def _temp(dfd: int, shown: str, what: str, mode: int) -> tuple[str, int]:
    """A new file of a random name in the directory `dfd` (O_EXCL, never through a link),
    checked on its descriptor: (its name, the descriptor)."""
    temp = f".tmp-{os.urandom(8).hex()}"  # secrets.token_hex, without its imports
    fd = os.open(temp, _FLAGS, mode, dir_fd=dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        os.unlink(temp, dir_fd=dfd)
        raise Refused(f"{what} {shown}: the temp file is not ours", _HINT)
    return temp, fd


def create(path: str | Path, what: str, mode: int = 0o666) -> int:
    """A new, empty file at `path` under `write`'s rules (the entry it replaces must be a
    regular file of ours with one link), for the caller to append to through the returned
    descriptor (opened write-only; the caller closes it). Why a descriptor and not a name:
    a stream written line by line (the rollout's events) is reopened by no one, so a link
    swapped in at the name later is never written through."""
    shown = str(path)
    head, name = _split(path)
    dfd = _open_dir(head, shown, what)
    try:
        _check_at(dfd, name, shown, what)
        tmp, fd = _temp(dfd, shown, what, mode)
        try:
            _check_at(dfd, name, shown, what)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=dfd)
            raise
        return fd
    finally:
        os.close(dfd)
