"""The live view as a sink of a rollout's events (`View`: redrawn in place on a terminal,
plain lines else) and `vpatch rollout watch REPORT`'s reader (`open_events`, `follow`): the
event file beside a report, followed as `tail -f` does until the run's last event.

Why a file and not a socket: the controller may run for an hour on a machine another
operator logs into later; a file beside the report is there for whoever can read the report,
needs no listener, and a finished run replays from it. What the watcher reads is input like
any other: opened without following a link, a regular file of the report's owner, each line
bounded and checked (patcher.rollout.events.from_json) before it is shown.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Callable
from typing import TextIO

from patcher.errors import UsageError
from patcher.output.lines import put
from patcher.rollout import liveview
from patcher.rollout.events import END, MAX_LINE, STALE_S, START, BadEvent, Event, from_json
from patcher.rollout.stream import events_path

HINT = (
    "give the --report FILE of a `vpatch rollout` (else the path it named on stderr at its start)"
)
POLL = 0.2  # seconds between two reads of a stream with nothing new
# Never through a link; never blocking on a FIFO planted at the name (refused once open).
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
TICK = 1.0  # seconds between two looks for a host that said nothing for a while (plain lines)


class View:
    """A sink: every event folded into the board; on a terminal (`live`) the board is drawn
    on `file` (patcher.output.screen), else each event that says something new is one plain
    line there, and a host whose phase says nothing for a while gets a line that says so
    (a thread looks every TICK seconds: liveview.Plain.still)."""

    def __init__(self, file: TextIO, live: bool, transient: bool = True) -> None:
        self.file = file
        self.board = liveview.Board()
        self.plain = liveview.Plain()
        self.lock = threading.Lock()
        self.screen = None
        self.stopped = threading.Event()
        self.ticker: threading.Thread | None = None
        if live:
            from patcher.output.screen import Screen

            self.screen = Screen(self.lines, file, transient)

    def lines(self, width: int) -> list[str]:
        with self.lock:
            return liveview.screen(self.board, time.time(), width)

    def __call__(self, ev: Event) -> None:
        with self.lock:
            liveview.fold(self.board, ev)
            said = self.plain.line(ev) if self.screen is None else None
            if said is not None:
                put(said, self.file, flush=True)
        if self.screen is not None:
            self.screen.refresh()

    def _tick(self) -> None:
        while not self.stopped.wait(TICK):
            with self.lock:
                for said in self.plain.still(self.board, time.time()):
                    put(said, self.file, flush=True)

    def start(self) -> None:
        if self.screen is not None:
            self.screen.start()
        else:
            self.ticker = threading.Thread(target=self._tick, name="vpatch-view", daemon=True)
            self.ticker.start()

    def stop(self) -> None:
        self.stopped.set()
        if self.screen is not None:
            self.screen.stop()
        if self.ticker is not None:
            self.ticker.join()
            self.ticker = None


# ---------------------------------------------------------------------------------------------
# `vpatch rollout watch REPORT`


def open_events(report: str) -> int:
    """The descriptor of REPORT's event stream, or UsageError (exit 2): no such report, not
    a rollout's, no stream beside it, or a stream that is a link, not a regular file, or
    not the report's owner's."""
    try:
        fd = os.open(report, _READ)
    except OSError as exc:
        raise UsageError(f"{report}: {exc.strerror or exc}", HINT) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{report}: not a regular file, not a rollout's report", HINT)
        with os.fdopen(os.dup(fd), "rb") as fh:
            doc = json.loads(fh.read())
    except ValueError:
        raise UsageError(f"{report}: not JSON, not a rollout's report", HINT) from None
    except OSError as exc:
        raise UsageError(f"{report}: {exc.strerror or exc}", HINT) from None
    finally:
        os.close(fd)
    if not isinstance(doc, dict) or doc.get("command") != "rollout":
        raise UsageError(f"{report}: not the report of a `vpatch rollout`", HINT)
    return _stream(events_path(report), st.st_uid)


def _stream(path: str, owner: int) -> int:
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        raise UsageError(
            f"{path}: no event stream beside the report",
            "a rollout writes REPORT.events from its start: this report's rollout has not "
            "begun yet, or a vpatch without `watch` wrote it",
        ) from None
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}; refused", HINT) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != owner:
        os.close(fd)
        raise UsageError(
            f"{path}: not a regular file of the report's owner (uid {owner}); refused",
            "the stream is written by the rollout that wrote the report: remove what is "
            "at that name, or give that rollout's report",
        )
    return fd


def follow(
    fd: int,
    sink: Callable[[Event], None],
    alive: Callable[[Event, float], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Event | None:
    """Every event of the stream to `sink`, as it comes, until the run's last (returned);
    None when the controller is gone (`alive(start, seconds the stream has been silent)` is
    False) and no last event came. A line that is not an event is UsageError."""
    alive = alive or controller_alive
    buf, start, heard = b"", None, clock()
    while True:
        chunk = os.read(fd, 65536)
        if chunk:
            heard = clock()
        else:
            if start is not None and not alive(start, clock() - heard):
                chunk = os.read(fd, 65536)  # what it wrote just before it went
                if not chunk:
                    return None
            else:
                sleep(POLL)
                continue
        buf += chunk
        *whole, buf = buf.split(b"\n")
        if len(buf) > MAX_LINE:
            raise UsageError(f"an event line over {MAX_LINE} bytes", HINT)
        for raw in whole:
            ev = _parse(raw)
            sink(ev)
            start = ev if ev.kind == START else start
            if ev.kind == END:
                return ev


def _parse(raw: bytes) -> Event:
    try:
        return from_json(json.loads(raw))
    except (ValueError, BadEvent) as exc:
        raise UsageError(
            f"the event stream holds a line that is not an event: {exc}", HINT
        ) from None


def controller_alive(start: Event, silent: float) -> bool:
    """Whether the run's controller may still be writing: on this node, its process exists;
    on another (whose processes a watcher cannot see), the stream has not been `silent` for
    STALE_S seconds (a running controller beats every BEAT_S: events.BEAT)."""
    import socket

    if start.pid is None or start.node != socket.gethostname():
        return silent < STALE_S
    try:
        os.kill(start.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True
