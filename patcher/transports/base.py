"""What every transport is, and the one loop that reads an agent's answer.

A transport runs agent requests on one target: `call(request)` sends one JSON line and returns
the agent's answer line, decoded; `close()` ends the agent. The pipe sessions (a local agent,
or an `ssh` client running it) and paramiko's channel differ only in how bytes move, so each
gives the loop here three primitives (`Link`: wait, send, recv) and `read_answer` does the
rest the same way for both: send while reading (neither side can block the other on a full
buffer), the deadline, the answer-size cap and the fleet's answer budget (patcher.transports.
answers). A session transport's `call` is one template too (`SessionTransport`): one call at
a time, and a session whose call failed in any way is never read again, since it may still
owe that call's answer.
"""

from __future__ import annotations

import select
import threading
import time
from typing import Any, Protocol

from patcher.errors import AgentError
from patcher.transports.answers import Budget


class Transport(Protocol):
    """Agent calls on one target; executors receive one (patcher.transports.open_transport
    makes it) and never choose."""

    target: str

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]: ...

    def close(self) -> None: ...


ERR_KEEP = 64 * 1024  # stderr kept per call: error messages quote only its last line
# The largest answer line a controller reads from one agent, per answer (the fleet's sum is
# answers.FLEET_ANSWER_BYTES). Decoding one costs about four times its size at the peak (the
# line, its text, the parsed document), so this is what one broken or hostile host can make
# the controller hold: 64 MiB read, ~256 MiB at the decode. Honest answers are far below it:
# an inspect carries the target files' texts (each at most 8 MiB: agent/fsops.MAX_FILE_BYTES;
# vLLM's largest module is ~0.2 MiB), a scan at most 16 MiB of texts (agent/scan), a host
# wheel's members at most 64 MiB before JSON (agent/hostwheel; in practice a few files).
MAX_ANSWER_BYTES = 64 << 20


def too_big(target: str) -> AgentError:
    return AgentError(
        f"{target}: agent answer is larger than {MAX_ANSWER_BYTES >> 20} MiB; refused",
        "inspect fewer or smaller files per run; report this if the files are ordinary",
    )


def wait(reads: list[Any], writes: list[Any], timeout: float) -> tuple[list[Any], list[Any]]:
    """(readable, writable) among objects with fileno(), through poll(): select() refuses
    descriptors above 1024, which a controller with a few hundred hosts in flight (sockets,
    paramiko's per-channel pipes) passes."""
    poller = select.poll()
    for obj in reads:
        poller.register(obj.fileno(), select.POLLIN)
    for obj in writes:
        poller.register(obj.fileno(), select.POLLOUT | (select.POLLIN if obj in reads else 0))
    ready = dict(poller.poll(max(0.0, timeout) * 1000))
    done = select.POLLHUP | select.POLLERR
    readable = [o for o in reads if ready.get(o.fileno(), 0) & (select.POLLIN | done)]
    writable = [o for o in writes if ready.get(o.fileno(), 0) & (select.POLLOUT | done)]
    return readable, writable


class Link(Protocol):
    """How bytes move to and from one agent: the per-transport primitives of `read_answer`."""

    def wait(self, sending: bool, timeout: float) -> tuple[bool, bool]:
        """(may recv, may send), waiting at most `timeout` for either."""
        ...

    def send(self, data: memoryview) -> int | None:
        """Bytes of `data` taken now without blocking; None: the agent takes no more input
        (it is gone: its exit status or stderr says why)."""
        ...

    def recv(self) -> bytes | None:
        """What the agent's stdout has now (b"": nothing yet), without blocking; None: it
        ended."""
        ...


def read_answer(
    link: Link, target: str, out: bytearray, payload: bytes, deadline: float, budget: Budget
) -> bytes | None:
    """Send `payload`, return the next answer line (without its newline) and keep what
    follows it in `out`; None if the agent's output ended first; TimeoutError at the
    deadline. Every byte read is charged to the run's `budget`, and a line past
    MAX_ANSWER_BYTES is refused (a long answer is scanned for its newline once)."""
    todo = memoryview(payload)
    scanned = 0  # bytes of `out` known to hold no newline
    while True:
        nl = out.find(b"\n", scanned)
        if nl >= 0:
            line = bytes(out[:nl])
            del out[: nl + 1]
            return line
        scanned = len(out)
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        readable, writable = link.wait(bool(todo), left)
        if todo and writable:
            taken = link.send(todo)
            todo = todo[taken:] if taken is not None else todo[:0]
        if readable:
            chunk = link.recv()
            if chunk is None:
                return None
            if chunk:
                budget.charge(target, len(chunk))
                out += chunk
                if len(out) > MAX_ANSWER_BYTES and b"\n" not in out[scanned:]:
                    raise too_big(target)


class SessionTransport:
    """One agent session per transport, opened by the first call (`_call`) and forgotten by
    `_end` after any failure: the template of `call` both session kinds share."""

    target: str
    call_timeout: float

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.budget = Budget()  # the run's, set by open_transport (Settings.budget)
        # The agent's code kept on the host (bundle.kept_boot): sessions that were sent the
        # bundle, and why the host had no usable copy at the last session's start ("": it had).
        self.bundles_sent = 0
        self.kept_miss = ""

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        with self._lock:
            try:
                return self._call(request, timeout or self.call_timeout)
            except BaseException:
                # Whatever broke the call (an error, or e.g. KeyboardInterrupt while waiting),
                # the session may still owe an answer: never read it as the next one.
                self._end(kill=False)
                raise
            finally:
                self.budget.settle()

    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        raise NotImplementedError

    def _end(self, kill: bool) -> int:
        """Forget the session (ending its agent); its exit status where one is known."""
        raise NotImplementedError
