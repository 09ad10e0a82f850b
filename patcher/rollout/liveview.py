"""What a person sees of a running rollout, from its events (patcher.rollout.events) only:
the live view's lines (`screen`: one line per host, redrawn in place on a terminal) and the
plain timestamped lines of a log (`Plain`). Pure: events and a clock in, lines out (golden
cases in tests/cases/rollout/view/); drawing them is patcher.output.screen's.

Why from the events alone: `vpatch rollout` and `vpatch rollout watch` in another terminal
fold the same records into the same board, so the two show the same thing; nothing here
reads a Host or a clock of its own (the caller passes `now`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from patcher.output import inert
from patcher.rollout.events import (
    ABORT,
    DONE,
    END,
    ENDED,
    HELD,
    PASS,
    PAUSE,
    PHASE,
    PROMOTE,
    RESUME,
    SCRAPE,
    START,
    STEER,
    Event,
    Evidence,
    Steered,
)
from patcher.serving.gates import pct

PLAIN_EVERY = 10.0  # seconds between two plain scrape lines of a host (unless news)
STILL_EVERY = 30.0  # seconds a host's phase may say nothing in a log before a line says so
WAITING = "waiting"  # a host not started yet
NOT_STARTED = "not started"  # ... when the run ended


def epoch(at: str) -> float:
    """An event's `at` (ISO 8601, `Z`) as seconds since the epoch; 0.0 if unreadable."""
    try:
        return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass
class Row:
    """One host on the board: its phase now (None: not started or done), when that began,
    its limit, the window's evidence so far; once done, its verdict and why."""

    host: str
    phase: str | None = None
    since: float = 0.0
    timeout: float | None = None
    evidence: Evidence | None = None
    verdict: str | None = None
    failed: str = ""  # the first failed step's words: what a way back is for
    detail: str = ""  # a done host's line (its error, when it did not keep the patch)
    steer: Steered | None = None  # the pause that holds it; the promote or abort it obeyed


@dataclass
class Board:
    """A run as its events so far tell it."""

    run: str = ""
    started: float = 0.0
    rows: dict[str, Row] = field(default_factory=dict)
    ended: bool = False
    ok: bool | None = None
    pid: int | None = None
    node: str | None = None
    paused: Steered | None = None  # the pause in force (no resume taken since)
    aborted: Steered | None = None  # the run's abort, once taken

    def row(self, host: str) -> Row:
        if host not in self.rows:  # a host the start did not name: shown all the same
            self.rows[host] = Row(host)
        return self.rows[host]


def fold(board: Board, ev: Event) -> Board:
    """`board` with one more event (changed in place, and returned)."""
    if ev.kind == START:
        board.run, board.started, board.pid, board.node = ev.run, epoch(ev.at), ev.pid, ev.node
        for h in ev.hosts:
            board.row(h)
        return board
    if ev.kind == END:
        board.ended, board.ok = True, ev.ok
        return board
    if ev.host is None:
        return _run_steer(board, ev.steer) if ev.kind == STEER else board
    _host_event(board.row(ev.host), ev)
    return board


def _host_event(r: Row, ev: Event) -> None:
    if ev.kind == PHASE:
        r.phase, r.since, r.timeout, r.evidence = ev.phase, epoch(ev.at), ev.timeout, None
        if ev.phase == HELD or (r.steer is not None and r.steer.verb == PAUSE):
            r.steer = ev.steer  # held by this pause; a host that starts is held no more
    elif ev.kind == STEER:
        r.steer = ev.steer
    elif ev.kind == SCRAPE:
        r.evidence = ev.evidence
    elif ev.kind == ENDED and ev.ok is False and not r.failed:
        r.failed = f"{ev.phase} failed: {ev.detail}"
    elif ev.kind == DONE:
        r.phase, r.evidence, r.verdict, r.detail = None, None, ev.verdict, ev.detail


def _run_steer(board: Board, s: Steered | None) -> Board:
    """The run as a steer taken leaves it: paused until a resume, aborted for good."""
    if s is not None and s.verb == PAUSE:
        board.paused = s
    elif s is not None and s.verb == RESUME:
        board.paused = None
    elif s is not None and s.verb == ABORT:
        board.aborted = board.aborted or s
    return board


def steer_words(s: Steered) -> str:
    """'pause 2 by alice at 18:01:00': a steer in few words (its time of day, UTC)."""
    return f"{s.verb} {s.seq} by {s.user} at {s.at[11:19]}"


def clock(seconds: float) -> str:
    """0:07, 12:03, 1:02:03."""
    s = max(0, int(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def evidence_words(ev: Evidence) -> str:
    """'so far fail (acceptance): n=8 (8.0 s), acceptance 15.2 %, 512.3 tokens/s (0.66x
    baseline)': a window so far in one line, the decision first (a narrow terminal cuts the
    end)."""
    parts = [f"n={ev.n} ({ev.seconds:.1f} s)"]
    if ev.acceptance is not None:
        parts.append(f"acceptance {pct(ev.acceptance)}")
    if ev.tokens_per_s is not None:
        vs = f" ({ev.ratio:.2f}x {ev.against})" if ev.ratio is not None and ev.against else ""
        parts.append(f"{ev.tokens_per_s:.1f} tokens/s{vs}")
    said = ", ".join(parts)
    if ev.decision is None:
        return said
    named = [g.name for g in ev.gates if g.state == ev.decision and ev.decision != PASS]
    return f"so far {ev.decision}" + (f" ({', '.join(named)})" if named else "") + f": {said}"


def _cells(r: Row, now: float, ended: bool) -> tuple[str, str, str]:
    """A host's phase (or verdict), time, and what it shows so far (`ended`: the run's end
    came, a host not started stays so)."""
    obeyed = steer_words(r.steer) if r.steer is not None else ""
    if r.verdict is not None:
        return r.verdict, "", r.detail or obeyed
    if r.phase is None:
        return "-", "", NOT_STARTED if ended else WAITING
    took = clock(now - r.since)
    if r.phase == HELD:
        return f"{HELD} (paused)", took, obeyed
    limit = f" of {clock(r.timeout)}" if r.timeout is not None else ""
    said = evidence_words(r.evidence) if r.evidence is not None else ""
    if r.steer is not None and r.steer.verb in (PROMOTE, ABORT):
        said = "; ".join(filter(None, [f"{_DONE[r.steer.verb]} ({obeyed})", said]))
    elif r.failed:  # an abort's failed step is the abort's: said above
        said = "; ".join(filter(None, [said, f"after {r.failed}"]))
    return r.phase, took + limit, said


_DONE = {PROMOTE: "promoted", ABORT: "aborted: going back"}


def _head_steer(board: Board) -> str:
    """What the run's head says of its steers while it runs: aborted, or paused."""
    if board.ended:
        return ""
    if board.aborted is not None:
        return f"; aborted by {board.aborted.user} at {board.aborted.at[11:19]}: none starts"
    if board.paused is not None:
        p = board.paused
        return f"; paused by {p.user} at {p.at[11:19]}: `vpatch rollout resume REPORT`"
    return ""


def screen(board: Board, now: float, width: int = 120) -> list[str]:
    """The live view at `now` (seconds since the epoch): a head line, then one line per
    host in the run's order (host, phase or verdict, elapsed of its limit, evidence so far),
    each cut to `width` columns and made inert."""
    rows = list(board.rows.values())
    done = sum(1 for r in rows if r.verdict is not None)
    state = ("ok" if board.ok else "not ok") if board.ended else clock(now - board.started)
    head = f"rollout {board.run}: {done} of {len(rows)} host(s) done, {state}{_head_steer(board)}"
    cells = [tuple(inert.line(c) for c in (r.host, *_cells(r, now, board.ended))) for r in rows]
    w0 = max((len(c[0]) for c in cells), default=0)
    w1 = max((len(c[1]) for c in cells), default=0)
    w2 = max((len(c[2]) for c in cells), default=0)
    out = [head]
    for host, phase, took, said in cells:
        text = f"  {host.ljust(w0)}  {phase.ljust(w1)}  {took.ljust(w2)}  {said}"
        out.append(text.rstrip())
    return [_cut(t, width) for t in [inert.line(head), *out[1:]]]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


@dataclass
class Plain:
    """Plain lines for a log (stderr not a terminal, or `watch` piped): one per event, the
    time first (UTC, from the event); a window's scrapes at most one a host per PLAIN_EVERY
    seconds, unless its decision changed; and (`still`) a line for a host whose phase said
    nothing for STILL_EVERY seconds, so that a log tells a slow server (the line comes) from
    a hung controller (it does not)."""

    shown: dict[str, tuple[float, str | None]] = field(default_factory=dict)
    said: dict[str, float] = field(default_factory=dict)  # host -> its last line's time

    def line(self, ev: Event) -> str | None:
        said = self._words(ev)
        if said is None:
            return None
        if ev.host is not None:
            self.said[ev.host] = epoch(ev.at)
        return inert.line(f"{ev.at[11:19]} {said}")

    def still(self, board: Board, now: float) -> list[str]:
        """At `now`, a line for each host in a phase that said nothing for STILL_EVERY
        seconds: in it since when, against its limit."""
        out: list[str] = []
        for r in board.rows.values() if not board.ended else ():
            last = max(self.said.get(r.host, r.since), r.since)
            if r.phase is None or now - last < STILL_EVERY:
                continue
            self.said[r.host] = now
            limit = f" of {clock(r.timeout)}" if r.timeout is not None else ""
            when = datetime.fromtimestamp(now, timezone.utc).strftime("%H:%M:%S")
            said = f"{when} {r.host}: {r.phase}: still in it, {clock(now - r.since)}{limit}"
            out.append(inert.line(said))
        return out

    def _words(self, ev: Event) -> str | None:
        who = ev.host or f"rollout {ev.run}"
        if ev.kind == SCRAPE:
            return self._scrape(who, ev, ev.evidence) if ev.evidence is not None else None
        if ev.kind == PHASE:
            self.shown.pop(who, None)  # a new phase's first scrape is news
        said = _WORDS.get(ev.kind)
        return f"{who}: {said(ev)}" if said is not None else None

    def _scrape(self, who: str, ev: Event, evidence: Evidence) -> str | None:
        t = epoch(ev.at)
        last = self.shown.get(who)
        news = last is None or last[1] != evidence.decision or t - last[0] >= PLAIN_EVERY
        if not news:
            return None
        self.shown[who] = (t, evidence.decision)
        return f"{who}: {ev.phase}: {evidence_words(evidence)}"


def _phase_words(ev: Event) -> str:
    if ev.phase == HELD and ev.steer is not None:
        return f"{HELD} (paused: {steer_words(ev.steer)})"
    limit = f" (limit {clock(ev.timeout)})" if ev.timeout is not None else ""
    return f"{ev.phase}: began{limit}"


def _steer_said(ev: Event) -> str:
    """A steer taken: for the run, what it does; on a host, where and what it did there."""
    if ev.steer is None:
        return "a steer"
    s = ev.steer
    said = f"{s.verb} {s.seq} by {s.user} (uid {s.uid}) at {s.at[11:19]}"
    if ev.host is not None:
        return f"{ev.phase}: {said}: {ev.detail}" if ev.phase else f"{said}: {ev.detail}"
    return f"{said}: {_RUN_STEER[s.verb]}"


_RUN_STEER = {
    PAUSE: "no host starts until `vpatch rollout resume REPORT`",
    RESUME: "held hosts start",
    PROMOTE: "the windows of the hosts in flight end, their patch kept",
    ABORT: "hosts in flight go back, none starts",
}


def _ended_words(ev: Event) -> str:
    took = f" after {ev.elapsed:.1f} s" if ev.elapsed is not None else ""
    how = "ok" if ev.ok else "failed"
    return f"{ev.phase}: {how}{took}" + (f": {ev.detail}" if ev.detail else "")


_WORDS: dict[str, Callable[[Event], str]] = {
    START: lambda ev: f"started on {len(ev.hosts)} host(s): {', '.join(ev.hosts)}",
    END: lambda ev: f"ended: {'ok' if ev.ok else 'not ok'}",
    PHASE: _phase_words,
    ENDED: _ended_words,
    STEER: _steer_said,
    DONE: lambda ev: f"done: {ev.verdict}" + (f": {ev.detail}" if ev.detail else ""),
}
