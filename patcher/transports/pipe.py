"""The agent in a local child process reached through pipes: the agent itself (LocalTransport,
kind `local`) or an `ssh` client running it on a host (patcher.transports.openssh).

One agent process per transport ("agent session"): it is started on the first call (or early,
by `start()`) and then answers one JSON request line with one JSON answer line, so a whole
apply (inspect, commit, verify) costs one interpreter start and one bundle upload per host,
not one per call. `close()` sends EOF and the agent exits. A call that times out or loses its
agent ends the session; the next call starts a fresh one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import weakref
from typing import IO, TYPE_CHECKING, Any

from patcher.errors import AgentError, HostError
from patcher.transports.answers import Budget
from patcher.transports.base import ERR_KEEP, SessionTransport, read_answer, wait
from patcher.transports.bundle import (
    MISS,
    TRUSTED_PYTHON,
    agent_argv,
    agent_bundle,
    decode_answer,
    miss_reason,
    request_line,
)
from patcher.transports.session import killed, timed_out

if TYPE_CHECKING:
    from patcher.transports import Settings, Target


class PipeTransport(SessionTransport):
    """One agent session in a local child process reached through pipes, started by the first
    call and ended by `close()` (or when the transport is garbage-collected, or at interpreter
    exit). The child is the agent itself (LocalTransport) or an `ssh` client running it on a
    host (transports.openssh): subclasses say which argv, and what an agent that ended without
    answering means."""

    target: str
    call_timeout: float
    # Added to the first call's deadline of a session: the time a child may spend connecting
    # before the agent runs (an SSH handshake), which the call's own timeout does not cover.
    connect_grace: float = 0.0

    # Whether the child's agent looks for the bundle kept on its host (bundle.kept_boot):
    # then a session starts with the first request alone, and the bundle follows only when
    # the agent's first line says it has none (`bundle.MISS`).
    kept = False

    def __init__(self) -> None:
        super().__init__()
        self._session: _LocalSession | None = None
        self._early = False  # started by start(), not yet called: owes the first request

    def start(self) -> None:
        """Begin the session now, ahead of its first call: the child connects (an SSH
        handshake, a remote interpreter starting) and takes the bundle while this process
        still loads specs and plans. The first call then only sends its request; a child that
        failed meanwhile reports its error there, exactly as if it had started with it."""
        with self._lock:
            if self._session is not None:
                return
            self._session = _LocalSession.start(self.target, self._argv())
            self._early = True
            if self.kept:
                return  # the host's own copy, or a miss the first call answers
            self._session.unsent = agent_bundle()
            self.bundles_sent += 1
            _widen(self._session.proc.stdin, len(self._session.unsent))
            self._session.feed()

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _no_answer(self, out: bytes, err: bytes, code: int) -> dict[str, Any]:
        """The child exited without an answer line: its exit code and stderr say why."""
        if code < 0 and not out.strip():  # OOM killer, kill -9, a crash
            raise killed(self.target, -code)
        return decode_answer(self.target, out, err, code)

    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        payload = request_line(request)
        session, early, self._early = self._session, self._early, False
        if session is not None and not early and (session.ended or session.proc.poll() is not None):
            # ended by its agent after its last answer (protocol.ENDED), or died between calls
            # (OOM killer...): nothing was asked of it
            session.end()
            session = None
        # A new session, or one started early, may have written to stderr already: all of it
        # is this call's (ssh's connect errors among it).
        mark = session.err_size() if session is not None and not early else 0
        fresh = session is None or early  # this call's answer is the session's first line
        if session is None:
            session = self._session = _LocalSession.start(self.target, self._argv())
            if not self.kept:
                payload = agent_bundle() + payload
                self.bundles_sent += 1
            deadline += self.connect_grace
        elif early:  # still connecting, maybe: the handshake's time is the call's grace too
            payload, session.unsent = session.unsent + payload, b""
            deadline += self.connect_grace
        try:
            line = session.exchange(payload, deadline, self.budget)
            if fresh and self.kept and line is not None and line.startswith(MISS):
                # No usable copy on the host: the bundle, then this request again (the agent
                # dropped every line before the bundle's; a newline first ends one it may
                # have been sent only part of).
                self.kept_miss = miss_reason(line)
                self.bundles_sent += 1
                line = session.exchange(b"\n" + agent_bundle() + payload, deadline, self.budget)
            elif fresh and self.kept:
                self.kept_miss = ""
        except TimeoutError:
            self._end(kill=True)
            raise timed_out(self.target, timeout) from None
        if line is None:  # the agent exited without answering
            out, err = bytes(session.out), session.err_since(mark)
            return self._no_answer(out, err, self._end(kill=False))
        try:
            answer = decode_answer(self.target, line, session.err_since(mark), 0)
            from patcher.agent import protocol  # loaded by the engine already: a lookup

            session.ended = answer.get(protocol.ENDED) is True
            return answer
        except AgentError:
            self._end(kill=True)  # it printed something that is not an answer: out of step
            raise

    def _end(self, kill: bool) -> int:
        session, self._session = self._session, None
        return session.end(kill=kill) if session is not None else 0

    def close(self) -> None:
        """EOF to the agent, which exits; killed if it has not within 2 s. Never waits for a
        call running in another thread for long: that call then sees its agent gone."""
        got = self._lock.acquire(timeout=5)
        try:
            # Never asked anything: it would read a cut bundle at EOF, so it is killed.
            self._end(kill=self._early)
            self._early = False
        finally:
            if got:
                self._lock.release()


class LocalTransport(PipeTransport):
    """Runs the agent with a local interpreter (default: `python3` on PATH), one process per
    transport."""

    def __init__(
        self,
        python: str = "python3",
        target: str = "local",
        call_timeout: float = 600.0,
        trusted_python: str = "",
        run_as: str = "",
    ) -> None:
        super().__init__()
        self.target = target
        self.trusted_python = trusted_python or TRUSTED_PYTHON
        self.run_as = run_as  # --run-as: as root, the user the environment's code runs as
        self.call_timeout = call_timeout  # --timeout: per agent call, as over SSH
        import shutil  # the local transport's only use of it: not imported for SSH runs

        exe = shutil.which(python)
        if exe is None:
            raise HostError(
                f"{target}: python interpreter {python!r} not found",
                "pass --python with the interpreter of the environment to patch",
            )
        self.python = exe

    def _argv(self) -> list[str]:
        return agent_argv(self.python, os.geteuid() == 0, self.trusted_python, self.run_as)


def _stderr_file() -> IO[bytes]:
    """An unlinked temp file for a child's stderr, opened for append (the child's writes never
    land where a read of ours left the shared offset): made with O_TMPFILE where the kernel and
    the file system have it, in the directory `tempfile` would choose first ($TMPDIR, else
    /tmp), so the session's start pays no `tempfile` import (it imports `random`: ~1.5 ms
    before the first ssh starts); anywhere else, `tempfile.TemporaryFile`."""
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        where = os.environ.get("TMPDIR") or "/tmp"
        try:
            fd = os.open(where, flag | os.O_RDWR | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError:
            pass
        else:
            return open(fd, "a+b", buffering=0)
    import tempfile

    return tempfile.TemporaryFile(mode="a+b", buffering=0)


class _LocalSession:
    """One local child process (the agent, or the ssh client running it): stdin/stdout pipes,
    stderr to an unlinked temp file (nothing to drain, so a chatty agent cannot block on it),
    its own process group for a clean kill."""

    def __init__(self, proc: subprocess.Popen[bytes], err: IO[bytes], target: str) -> None:
        self.proc, self.err, self.out, self.target = proc, err, bytearray(), target
        self.unsent = b""  # what start() could not write yet without blocking
        self.ended = False  # its agent ended the session after its last answer (protocol.LAST)
        # No zombie or orphan even if nobody calls close(): GC or interpreter exit ends it too.
        self._finalizer = weakref.finalize(self, _end_local, proc, err, 2.0, False)

    @classmethod
    def start(cls, target: str, argv: list[str]) -> _LocalSession:
        err = _stderr_file()
        try:
            # process-start: the agent (bundle.agent_argv: `-I`, stage 0 `-I -S`; no cwd or
            # PYTHON* variable reaches its path) or the OpenSSH client; a local agent keeps the
            # operator's cwd, against which a relative --state-dir is meant.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                bufsize=0,
                start_new_session=True,
            )
        except OSError as exc:
            err.close()
            raise HostError(f"{target}: cannot run {argv[0]}: {exc.strerror}") from None
        assert proc.stdin is not None
        os.set_blocking(proc.stdin.fileno(), False)
        return cls(proc, err, target)

    def feed(self) -> None:
        """Write as much of `unsent` as the pipe takes now, never blocking."""
        assert self.proc.stdin is not None
        try:
            done = os.write(self.proc.stdin.fileno(), self.unsent)
        except (BlockingIOError, BrokenPipeError, ConnectionResetError):
            return  # full, or the child is gone: the first call finds out which
        self.unsent = self.unsent[done:]

    def exchange(self, payload: bytes, deadline: float, budget: Budget) -> bytes | None:
        """Send payload, return the next answer line (without its newline), or None if the
        agent's stdout ended first; TimeoutError at the deadline (base.read_answer)."""
        return read_answer(self, self.target, self.out, payload, deadline, budget)

    # The Link primitives (patcher.transports.base): non-blocking pipe I/O.

    def wait(self, sending: bool, timeout: float) -> tuple[bool, bool]:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        readable, writable = wait([stdout], [stdin] if sending else [], timeout)
        return bool(readable), bool(writable)

    def send(self, data: memoryview) -> int | None:
        assert self.proc.stdin is not None
        try:
            return os.write(self.proc.stdin.fileno(), data)
        except BlockingIOError:
            return 0
        except (BrokenPipeError, ConnectionResetError):
            return None  # the agent is gone: its exit status says why

    def recv(self) -> bytes | None:
        assert self.proc.stdout is not None
        return os.read(self.proc.stdout.fileno(), 1 << 20) or None

    def err_size(self) -> int:
        return os.fstat(self.err.fileno()).st_size

    def err_since(self, mark: int) -> bytes:
        """What the agent wrote to stderr since `mark` (at most the last ERR_KEEP bytes)."""
        end = self.err_size()
        start = max(mark, end - ERR_KEEP)
        return os.pread(self.err.fileno(), end - start, start) if end > start else b""

    def end(self, kill: bool = False) -> int:
        """Stop the agent (EOF, or SIGKILL to its group) and reap it; its exit code."""
        self._finalizer.detach()
        return _end_local(self.proc, self.err, 2.0, kill)


def _widen(pipe: IO[bytes] | None, size: int) -> None:
    """Let an early session's stdin pipe hold the whole bundle (~0.5 MiB), so the agent
    has all of it, and is set up, by the time the first request comes: with the default
    64 KiB the rest waited for that request, on the critical path of a one-host run
    (docs/scale-lab.md). Linux (F_SETPIPE_SZ); elsewhere, or over the user's pipe limits, the
    pipe stays as it is and the first call sends the rest."""
    import fcntl

    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if pipe is None or setsize is None:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe.fileno(), setsize, size)


def _end_local(proc: subprocess.Popen[bytes], err: IO[bytes], grace: float, kill: bool) -> int:
    """Close stdin (EOF: the agent exits), reap; SIGKILL the group if asked or after `grace`.

    The group is only signalled while the agent is unreaped (alive or a zombie), so its pgid
    cannot have been reused by then."""
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass
    if not kill:
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            kill = True
    if kill and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
    proc.wait()
    for fh in (proc.stdout, err):
        if fh is not None:
            fh.close()
    return proc.returncode


def make(target: Target, settings: Settings) -> LocalTransport:
    """Kind `local`: this machine's `target.python`."""
    return LocalTransport(
        target.python,
        target=target.name,
        call_timeout=settings.call_timeout,
        trusted_python=settings.trusted_python,
        run_as=settings.run_as,
    )
