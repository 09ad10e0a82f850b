"""What a person sees while vpatch works, and how much of it: -q, -v, and the live line.

One setting per process (`configure`, from the global -q/-v and --json): the CLI's edge sets
it, the layers below ask it (`quiet()`, `verbose()`) instead of each taking a flag. Every
word of it goes to stderr: stdout is the result (or the one JSON document).

- quiet (-q): no live line, no note/warning lines; the result lines, the summary, and every
  `error:`/`hint:` still print.
- normal: on a terminal, one transient line while a host works (`local: checking (imports,
  probes) 0:00:03`, rich); piped or under --json, nothing (no control codes in a log).
- verbose (-v): also, per host, the command line its agent runs under, each agent exchange
  as it ends (what it did, how long), and what the agent wrote to its stderr.

The agent exchanges report here through `step` (patcher.run.exchange.call): what an exchange does
is read off its request (`describe`), so the engine needs no hooks of its own. rich is
imported only when the live line is shown.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from patcher.result import HostResult

QUIET, NORMAL, VERBOSE = 0, 1, 2

# What an agent request's op does, in the words of the live line.
_WORDS = {
    "inspect": "inspecting",
    "repair": "repairing an interrupted transaction",
    "commit": "writing",
    "verify": "checking (imports, probes)",
    "restart": "restarting",
    "health": "waiting for health",
    "rollout_step": "journaling the rollout step",
    "rollout_lease": "asking for the rollout lease",
    "scan": "reading the package's files against pip's RECORD",
    "fetch": "scraping metrics",
}
_LONG_ARG = 120  # an argv word longer than this (the agent's boot code) is shown by its size


class _State:
    def __init__(self) -> None:
        self.level = NORMAL
        self.machine = False  # --json: stdout is a document; stderr carries no live line
        self.lock = threading.Lock()
        self.live: Any = None  # the rich Progress of the live line, while one is shown
        self.task: Any = None
        self.described: set[str] = set()  # targets whose agent command line -v has shown
        self.err_marks: dict[int, int] = {}  # id(agent session) -> stderr bytes already shown


_state = _State()


def configure(quiet: bool = False, verbose: int = 0, machine: bool = False) -> None:
    """The process's level: -q, -v (any count), neither; `machine`: --json. Called at each
    command's start, it also forgets what the last command in this process showed (a second
    run in one process, as the tests make, starts as the first did)."""
    global _state
    _state = _State()
    _state.level = QUIET if quiet else VERBOSE if verbose else NORMAL
    _state.machine = machine


def quiet() -> bool:
    """-q: no progress, no notes or warnings (errors, results and summary still print)."""
    return _state.level == QUIET


def verbose() -> bool:
    """-v: per-host detail on stderr (agent command line, exchanges and their times)."""
    return _state.level == VERBOSE


def shows_live() -> bool:
    """Whether a live line may be drawn: a person at a terminal, neither -q nor --json."""
    return _state.level != QUIET and not _state.machine and sys.stderr.isatty()


def describe(request: dict[str, Any]) -> str:
    """What one agent exchange does, in words: its op and the ops chained after it (`then`);
    a planned-ahead chain (`then_if`: run only if the host is as guessed) said as such."""
    said = _words([request, *(request.get("then") or [])])
    chains = list((request.get("then_if") or {}).values())
    if chains:  # every guess carries the same kinds of step
        said += f" (then, if as planned: {_words(chains[0])})"
    return said


def _words(requests: list[dict[str, Any]]) -> str:
    words: list[str] = []
    for r in requests:
        op = str(r.get("op", ""))
        word = _WORDS.get(op, op)
        if word and word not in words:
            words.append(word)
    return ", ".join(words)


def command_line(argv: list[str]) -> str:
    """An agent's argv as a shell would take it, its long boot code shown by size."""
    import shlex

    return shlex.join(a if len(a) <= _LONG_ARG else f"<{len(a)} bytes>" for a in argv)


def say(text: str) -> None:
    """One line on stderr that is not an error (a note a person may want): none under -q."""
    if _state.level != QUIET:
        _print(text)


def detail(text: str) -> None:
    """One line on stderr under -v only."""
    if _state.level == VERBOSE:
        _print(text)


def _print(text: str) -> None:
    from patcher.output.inert import clean

    with _state.lock:
        if _state.live is not None:
            _state.live.console.print(clean(text), markup=False, highlight=False)
        else:
            print(clean(text), file=sys.stderr, flush=True)


@contextmanager
def live(title: str) -> Iterator[None]:
    """While the body runs, a transient live line on stderr (terminal only): a spinner, the
    latest `step`'s words and the time elapsed. Gone (erased) when the body ends."""
    if not shows_live():
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from patcher.output import colour

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        TimeElapsedColumn(),
        console=colour.console(sys.stderr),
        transient=True,
    )
    with _state.lock:
        _state.live, _state.task = bar, bar.add_task(title, total=None)
    bar.start()
    try:
        yield
    finally:
        stop_live()


def stop_live() -> None:
    """Erase the live line now (the result prints next), if one is shown."""
    with _state.lock:
        bar, _state.live, _state.task = _state.live, None, None
    if bar is not None:
        bar.stop()


def step(target: str, what: str) -> None:
    """A host's next stage begins (shown on the live line, if one is drawn)."""
    busy(f"{target}: {what}")


def busy(text: str) -> bool:
    """Say `text` on the live line; False when none is drawn. rich draws one live display at
    a time: other progress (a wheel download during a run) says itself here while one is."""
    with _state.lock:
        if _state.live is None:
            return False
        _state.live.update(_state.task, description=text)
        return True


@contextmanager
def exchange(transport: Any, request: dict[str, Any]) -> Iterator[None]:
    """Around one agent exchange: the live line says what it does; -v also names the agent's
    command line (once per target), the exchange's time, and the agent's new stderr."""
    target = str(getattr(transport, "target", "?"))
    what = describe(request)
    step(target, what)
    if _state.level != VERBOSE:
        yield
        return
    _describe_transport(target, transport)
    started = time.monotonic()
    try:
        yield
    finally:
        detail(f"{target}: {what}: {time.monotonic() - started:.2f}s")
        _agent_stderr(target, transport)


def _describe_transport(target: str, transport: Any) -> None:
    argv = getattr(transport, "_argv", None)  # pipe and OpenSSH transports run a command
    with _state.lock:
        if target in _state.described or not callable(argv):
            return
        _state.described.add(target)
    detail(f"{target}: agent: {command_line(list(argv()))}")
    shared = getattr(transport, "share_note", None)  # the OpenSSH transport's sharing
    if shared:
        detail(f"{target}: ssh: {shared}")
    master = getattr(transport, "master_note", None)  # ...and whether a master is reused
    said = master() if callable(master) else ""
    if said:
        detail(f"{target}: ssh: {said}")


def _agent_stderr(target: str, transport: Any) -> None:
    """What the agent's session wrote to stderr since last shown (pipe/OpenSSH sessions keep
    it in a file; other transports quote it only in their errors)."""
    session = getattr(transport, "_session", None)
    if session is None or not hasattr(session, "err_since"):
        return
    with _state.lock:
        mark = _state.err_marks.get(id(session), 0)
        _state.err_marks[id(session)] = session.err_size()
    text = session.err_since(mark).decode("utf-8", "replace")
    for line in text.splitlines():
        detail(f"{target}: agent stderr: {line}")


class HostsProgress:
    """What the fleet's scheduler (patcher.run.fleet) reports as hosts finish: nothing here;
    a rich bar on a terminal (patcher.output.human.Bar), a rollout's batch lines
    (patcher.rollout.view.BatchLines)."""

    def start(self, total: int) -> None: ...

    def advance(self, result: HostResult) -> None: ...

    def stop(self) -> None: ...
