"""The root side of a dropped worker: the operator's own requests, and the restart scan.

Why: `vpatch rollout`'s restart command, its health poll and its metrics scrape are the
operator's (docs/rollout.md: "as the agent's user, root with --sudo"), not the environment's.
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
    from . import wire

    pending = b""
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
            pending += chunk
            # At EOF a last line without its newline (one-shot callers) goes as it is.
            end = b"\n" if chunk else b""
            if chunk:
                *lines, pending = pending.split(b"\n")
            else:
                lines, pending = ([pending] if pending else []), b""
            for line in lines:
                req = operator_line(line)
                if req is None:
                    _write(worker_in, line + end)
                else:
                    _write(1, (wire.dumps(answer(req)) + "\n").encode("utf-8"))
            if not chunk:
                reading = False
                os.close(worker_in)


def _write(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass  # the worker (or the caller) is gone: its status, or EOF, says so
