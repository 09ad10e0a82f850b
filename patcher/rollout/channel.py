"""A rollout's steering channel: `REPORT.steer`, next to the report the rollout writes as it
goes, a log of patcher.rollout.steer records (one JSON object a line). The controller creates
it before any host is contacted and reads it between steps and at every scrape; `vpatch rollout
pause|resume|promote|abort REPORT` appends to it.

Trust: the channel tells a controller (often root) to stop, keep or roll back a fleet, so no
one but the run's owner (the user the controller runs as) or root may write it, and no one
may plant one:

- the controller makes the file `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600; a name already there
  must be its own regular file (one link, closed to group and others), else the rollout is
  refused at its start (exit 2, no host contacted). It keeps the descriptor it made and
  checks it with fstat at every read: a file whose owner or mode changed since is refused
  (one warning; no steer of it is obeyed);
- a writer opens the name `O_NOFOLLOW` (never creating it) and decides on fstat of that very
  descriptor, never on a path checked before: a link, a non-regular file, a hard-linked one,
  a file open to group or others, or one owned by anyone but the writer (root excepted) is
  refused with the reason. Records are appended under an exclusive flock, each with the next
  sequence number.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass
from datetime import datetime, timezone

from patcher.errors import UsageError
from patcher.rollout import steer
from patcher.rollout.steer import Steer

SUFFIX = ".steer"
HINT_OWNER = "only the user that runs the rollout (or root) may steer it"
HINT_PLANTED = (
    "remove it (or give --report another path): vpatch steers only through a file of its own"
)


def path_of(report: str) -> str:
    """The channel of the rollout whose report is `report`."""
    return report + SUFFIX


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def me() -> tuple[int, str]:
    """(effective uid, its user name; the uid as text when it has none)."""
    import pwd

    uid = os.geteuid()
    try:
        return uid, pwd.getpwuid(uid).pw_name[: steer.MAX_FIELD]
    except KeyError:
        return uid, str(uid)


def problem(st: os.stat_result, owners: tuple[int, ...]) -> str | None:
    """Why a channel file's fstat makes it untrusted (None: trusted). `owners`: the uids it
    may belong to."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink != 1:
        return f"has {st.st_nlink} hard links"
    if st.st_uid not in owners:
        return f"is owned by uid {st.st_uid}"
    if st.st_mode & 0o077:
        return f"is open to group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _append(fd: int, rec: Steer) -> None:
    import json

    data = (json.dumps(rec.to_json(), sort_keys=True) + "\n").encode()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _read_all(fd: int, size: int) -> bytes:
    if size > steer.MAX_BYTES:
        raise ValueError(f"is over {steer.MAX_BYTES} bytes")
    return os.pread(fd, size, 0)


# ---------------------------------------------------------------------------------------------
# The controller's side


class Channel:
    """The controller's channel of one run: the descriptor it made (or checked) at the start,
    read again whenever the file grew. Shared by every host thread of the run."""

    def __init__(self, fd: int, path: str, run: str) -> None:
        self.fd, self.path, self.run = fd, path, run
        self._lock = threading.Lock()
        self._size = -1
        self._state = steer.State(run)
        self.refused = ""  # why the channel is not read any more (a warning says it once)
        self.problems: list[str] = []
        self.records: list[Steer] = []  # as last read (steering says the new ones once)

    def state(self) -> steer.State:
        """What is in force now. A channel that fails its fstat check is read no more: the
        state it had stands, pause and abort dropped (nothing from an untrusted file)."""
        with self._lock:
            if self.refused or self.fd < 0:
                return self._state
            try:
                st = os.fstat(self.fd)
                why = problem(st, (os.geteuid(),))
                if why is None and st.st_size != self._size:
                    raw = _read_all(self.fd, st.st_size)
                    records, self.problems = steer.parse(raw)
                    self._state = steer.fold(records, self.run)
                    self.records = records
                    self._size = st.st_size
            except (OSError, ValueError) as exc:
                why = str(getattr(exc, "strerror", None) or exc)
            if why is not None:
                self.refused = (
                    f"the steering channel {self.path} {why}: refused, no steer of it is obeyed"
                )
                self._state = steer.State(self.run, started=True, live=True)
            return self._state

    def write(self, verb: str, pid: int = 0) -> None:
        """The controller's own record (`start`, `end`)."""
        import fcntl

        uid, user = me()
        with self._lock:
            if self.fd < 0:
                return
            fcntl.flock(self.fd, fcntl.LOCK_EX)  # a writer's next seq is read under it too
            try:
                size = os.fstat(self.fd).st_size
                records, _ = steer.parse(_read_all(self.fd, size))
                seq = max((r.seq for r in records), default=0) + 1
                os.lseek(self.fd, 0, os.SEEK_END)
                _append(self.fd, Steer(self.run, verb, seq, uid, user, now(), pid))
            finally:
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """`end`, then the descriptor closed: a steer of the run is refused from now on."""
        try:
            self.write(steer.END)
        except OSError:
            pass
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


def open_run(report: str, run: str, resume: bool) -> Channel:
    """The channel of a rollout starting (`resume`: going on) with report `report`: made
    0600 by this user, or an existing one of its own taken (emptied unless `resume`: a fresh
    run's log starts empty), then `start` written. UsageError (exit 2, before any host is
    contacted) when something else holds the name."""
    path = path_of(report)
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            fd = os.open(path, flags)
    except OSError as exc:
        raise UsageError(
            f"cannot make the rollout's steering channel {path}: {exc.strerror or exc}",
            HINT_PLANTED if exc.errno == 40 else "give --report FILE in a directory you can write",
        ) from None
    try:
        why = problem(os.fstat(fd), (os.geteuid(),))
        if why is not None:
            raise UsageError(
                f"the steering channel {path} {why}: refused, nothing written through it",
                HINT_PLANTED,
            )
        os.set_blocking(fd, True)
        os.fchmod(fd, 0o600)
        if not resume:
            os.ftruncate(fd, 0)
        chan = Channel(fd, path, run)
        chan.write(steer.START, os.getpid())
    except BaseException:
        os.close(fd)
        raise
    return chan


# ---------------------------------------------------------------------------------------------
# The operator's side


@dataclass(frozen=True)
class Written:
    """A steer written: the record, the channel, and the run's controller as its last
    `start` named it (`alive`: a process by that pid exists on this machine)."""

    record: Steer
    path: str
    pid: int
    alive: bool


def _open_for_writer(path: str) -> int:
    """The channel's descriptor for a writer, checked on itself (module docstring)."""
    flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the name is a symbolic link
            why, hint = "is a symbolic link: refused", HINT_PLANTED
        elif isinstance(exc, FileNotFoundError):
            why = "does not exist: the report is not of a rollout that can be steered"
            hint = "give the report of a running rollout (its --report, or the file it named)"
        elif isinstance(exc, PermissionError):
            why, hint = "cannot be opened (permission denied)", HINT_OWNER
        else:
            why, hint = f"cannot be opened: {exc.strerror or exc}", HINT_OWNER
        raise UsageError(f"the steering channel {path} {why}", hint) from None
    me_uid = os.geteuid()
    try:
        st = os.fstat(fd)
        owners = (st.st_uid,) if me_uid == 0 else (me_uid,)
        bad = problem(st, owners)
        if bad is not None:
            hint = HINT_PLANTED
            if st.st_uid not in owners:  # the run is another user's
                bad, hint = f"{bad}, not by uid {me_uid} that steers", HINT_OWNER
            raise UsageError(f"the steering channel {path} {bad}: refused, nothing written", hint)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write(report: str, run: str, verb: str) -> Written:
    """Append `verb` to the channel of run `run` (report `report`), if the run may take it
    now (steer.refusal); UsageError (exit 2, nothing written) otherwise."""
    import fcntl

    path = path_of(report)
    fd = _open_for_writer(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            raw = _read_all(fd, os.fstat(fd).st_size)
        except ValueError as exc:
            raise UsageError(f"the steering channel {path} {exc}: refused", HINT_PLANTED) from None
        records, _ = steer.parse(raw)
        state = steer.fold(records, run)
        refused = steer.refusal(state, verb)
        if refused is not None:
            raise UsageError(*refused)
        uid, user = me()
        rec = Steer(run, verb, state.last + 1, uid, user, now())
        _append(fd, rec)
    finally:
        os.close(fd)  # the flock goes with it
    return Written(rec, path, state.pid, _alive(state.pid))


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
