"""The root side of a dropped worker: the operator's own requests, and the restart scan.

Why: `vpatch rollout`'s restart command, its health poll and its metrics scrape are the
operator's (docs/rollout.md: "the SSH login user, root with --sudo"), not the environment's.
Answered by a worker that dropped to the environment's owner, `systemctl restart` failed on
every owner-run environment, and the owner (whose code the worker runs) decided what
"restarted" and "healthy" meant. The worker cannot pass them on either: it is the owner's
process, and a root helper that ran whatever command it was handed would be root for the owner.

So where a worker drops, the root process above it (privsep's stage 0, or the helper a
worker forks before it drops in `settle`) keeps the controller's stdin and hands the worker a
pipe instead: each request line the controller sends passes through here first. An operator
op (`OPERATOR_OPS`) is answered here, as root, on the same stdout the worker answers on (the
controller waits for each answer before it sends the next request, so the two never
interleave); every other line goes to the worker unchanged. The restart scan question from the
worker (a time and its site dirs: data) is answered here too, as before. Root stays with the
trusted interpreter (or, after `settle`, a root-owned interpreter before `site`): no code of
the environment runs in this process.
"""

from __future__ import annotations

import os
import select

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the agent does not import typing (~4 ms per start)
    from typing import Any, Callable

OPERATOR_OPS = ("restart", "health", "fetch")
_PEEK = 1 << 16  # a line longer than this is no operator op (theirs are a command or a URL)
_READ = 1 << 16


def operator_line(line: bytes) -> dict[str, Any] | None:
    """The request in `line` when it is the operator's (answered here), else None."""
    if len(line) > _PEEK or b'"op"' not in line:
        return None
    from . import wire

    try:
        req = wire.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(req, dict) or req.get("op") not in OPERATOR_OPS:
        return None
    return None if "then" in req or "then_if" in req else req


def answer(req: dict[str, Any]) -> dict[str, Any]:
    """An operator op's answer, as the agent's own `answer` would give it."""
    from . import fetch, protocol, restart

    try:
        if req.get("op") == "fetch":
            res = fetch.fetch(
                str(req.get("url", "")),
                float(req.get("timeout", 10)),
                int(req.get("max_bytes", fetch.DEFAULT_MAX_BYTES)),
            )
        else:
            res = restart.OPS[str(req.get("op"))](req)
        res["ok"] = True
        res["protocol"] = protocol.PROTOCOL
    except ValueError as exc:  # fetch.BadURL too
        res = protocol.error(protocol.INPUT, str(exc))
    except OSError as exc:
        res = protocol.error(protocol.OS_ERROR, str(exc.strerror or exc))
    res["pid"] = os.getpid()
    res["uid"] = os.geteuid()
    return res


def serve(stdin: int, worker_in: int, ask: int, reply: int, scan: Callable[[bytes], bytes]) -> None:
    """Until the worker closes its end of `ask` (it ended): pass the controller's request
    lines from `stdin` to `worker_in` (at its EOF, close it: the worker then ends), answer
    operator ops on stdout, and answer each scan question line from `ask` on `reply`."""
    lines = _Lines(worker_in)
    question = b""
    reading = True
    while True:
        poller = select.poll()
        poller.register(ask, select.POLLIN)
        if reading:
            poller.register(stdin, select.POLLIN)
        for fd, _ev in poller.poll():
            try:
                chunk = os.read(fd, _READ)
            except OSError:
                chunk = b""
            if fd == ask:
                if not chunk:
                    return
                question += chunk
                while b"\n" in question:
                    line, question = question.split(b"\n", 1)
                    _write(reply, scan(line))
                if len(question) > _READ:
                    return  # not a question: the worker gets EOF on its next one
                continue
            lines.feed(chunk)
            if not chunk:
                reading = False
                os.close(worker_in)


class _Lines:
    """The controller's request lines, each looked at once: a line that grows past _PEEK
    without its newline is no operator op and streams to the worker as it comes (a commit's
    file texts, megabytes: never buffered whole, never scanned twice)."""

    def __init__(self, worker_in: int, out: int = 1) -> None:
        self.worker_in, self.out = worker_in, out
        self.buf = b""
        self.through = False  # passing the rest of a long line on

    def feed(self, data: bytes) -> None:
        """Take `data` from stdin (b"": its EOF, where a last line may lack its newline:
        one-shot callers)."""
        if not data:
            if self.buf:
                self._line(self.buf, b"")
            self.buf = b""
            return
        while data:
            nl = data.find(b"\n")
            if self.through:
                cut = len(data) if nl < 0 else nl + 1
                _write(self.worker_in, data[:cut])
                data, self.through = data[cut:], nl < 0
            elif nl < 0:
                self.buf += data
                data = b""
                if len(self.buf) > _PEEK:
                    _write(self.worker_in, self.buf)
                    self.buf, self.through = b"", True
            else:
                line, self.buf, data = self.buf + data[:nl], b"", data[nl + 1 :]
                self._line(line, b"\n")

    def _line(self, line: bytes, end: bytes) -> None:
        req = operator_line(line)
        if req is None:
            _write(self.worker_in, line + end)
        else:
            from . import wire

            _write(self.out, (wire.dumps(answer(req)) + "\n").encode("utf-8"))


def _write(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass  # the worker (or the caller) is gone: its status, or EOF, says so
