"""A running rollout's events (patcher.rollout.events), made from its hosts as they walk and
handed to every sink: the file beside the report that `vpatch rollout watch` follows
(`REPORT.events`, always written), `--events FILE|-`, and the live view on stderr.

The walk calls in at three places only (patcher.rollout.driver wires them): as a host begins
a step (`step`: the step before it ended, this one began), at each scrape of a measuring
window (`seen`: the evidence so far, the gates judged with the window not over) and as a
host ends (`done`); the run's start and end are the driver's, and so are the steers
(`steered`, told by patcher.rollout.steering as it takes one) and a host a pause holds
before its start (`held`). A sink that fails (a full disk,
a reader gone from `--events -`) is dropped with one warning: the rollout goes on, its report
and the hosts' journals have every step.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from patcher import safewrite
from patcher.output.lines import warning
from patcher.rollout import events
from patcher.rollout.events import Event
from patcher.serving.gates import BASELINE, CONTROL

if TYPE_CHECKING:
    from patcher.result import HostResult, RunResult
    from patcher.rollout.canary import SoFar
    from patcher.rollout.report import LiveReport
    from patcher.rollout.settings import Settings
    from patcher.rollout.steer import Steer
    from patcher.rollout.walk import Host

Sink = Callable[[Event], None]
SUFFIX = ".events"  # the stream beside the report: REPORT.events


def events_path(report: str) -> str:
    """Where a rollout's event stream is: beside its report, its name and `.events`."""
    return report + SUFFIX


class LineFile:
    """A sink writing one JSON line per event to a file made by safewrite.create at the
    first event (the run's start: after its inputs were checked and before any host is
    contacted; never through a link planted at the name), each line one write(2): a reader
    following the file sees whole lines, or a last line not finished yet."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what
        self.fd: int | None = None

    def __call__(self, ev: Event) -> None:
        if self.fd is None:
            self.fd = safewrite.create(self.path, self.what)
        os.write(self.fd, _line(ev))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _line(ev: Event) -> bytes:
    import json

    return (json.dumps(ev.to_json(), separators=(",", ":")) + "\n").encode()


def stdout_sink(ev: Event) -> None:
    """`--events -`: the line on stdout, flushed (a tool reads it as it comes)."""
    import sys

    sys.stdout.write(_line(ev).decode())
    sys.stdout.flush()


class Stream:
    """The events of one run, to its sinks, one event at a time (hosts walk in threads)."""

    def __init__(self, run: str, cfg: Settings, sinks: Sequence[Sink]) -> None:
        self.run = run
        self.cfg = cfg
        self.sinks = list(sinks)
        self.lock = threading.Lock()
        self.began: dict[str, float] = {}  # host -> monotonic start of its current phase
        self.told: dict[str, int] = {}  # host -> how many of its phases were said ended
        self.files = [s for s in sinks if isinstance(s, LineFile)]  # closed at the end
        self.ended = False  # the run's last event was said: nothing more is
        self.said = time.monotonic()  # when the newest event was said
        self.quiet = threading.Event()  # set at the run's end: no more beats
        self.beater: threading.Thread | None = None

    def emit(self, kind: str, **what: Any) -> None:
        from patcher.rollout.walk import _now

        ev = Event(at=_now(), run=self.run, kind=kind, **what)
        with self.lock:
            if self.ended:  # a host still in flight after a second Ctrl-C: the run is over
                return
            self.ended = kind == events.END
            self.said = time.monotonic()
            for sink in list(self.sinks):
                try:
                    sink(ev)
                except (OSError, ValueError) as exc:  # a full disk, a closed pipe
                    self.sinks.remove(sink)
                    why = getattr(exc, "strerror", None) or str(exc)
                    warning(f"the rollout's events: a sink failed ({why}); the report goes on")

    def start(self, hosts: Sequence[str]) -> None:
        import socket

        self.emit(events.START, hosts=tuple(hosts), pid=os.getpid(), node=socket.gethostname())
        self.beater = threading.Thread(target=self._beat, name="vpatch-beat", daemon=True)
        self.beater.start()

    def _beat(self) -> None:
        """A `beat` whenever nothing else was said for BEAT_S (a restart, a model load), so
        that a watcher on another node tells a silent run from a gone controller."""
        while not self.quiet.wait(events.BEAT_S / 3):
            if time.monotonic() - self.said >= events.BEAT_S:
                self.emit(events.BEAT)

    def step(self, h: Host) -> None:
        """`h` begins its current step: the steps it ended since are said first."""
        name = h.target.name
        with h.lock:
            ended = [(p.step, p.ok, p.detail, p.seconds) for p in h.phases]
            step = h.current
        self._ended(name, ended)
        self.began[name] = time.monotonic()
        self.emit(events.PHASE, host=name, phase=step, elapsed=0.0, timeout=self.timeout(step))

    def _ended(self, name: str, phases: Sequence[tuple[str, bool, str, float]]) -> None:
        for step, ok, detail, seconds in phases[self.told.get(name, 0) :]:
            said = events.first_line(detail)
            self.emit(events.ENDED, host=name, phase=step, ok=ok, detail=said, elapsed=seconds)
        self.told[name] = max(self.told.get(name, 0), len(phases))

    def timeout(self, step: str | None) -> float | None:
        c = self.cfg
        if step is None:
            return None
        return events.timeout_of(
            step,
            window=c.window,
            max_window=c.max_window,
            restart=c.restart_timeout,
            health=c.health_timeout,
        )

    def seen(self, h: Host, now: SoFar) -> None:
        """A scrape of `h`'s window: the evidence so far; in the after-window, the gates
        judged as they stand (canary.SoFar: the same judgement the window's extension reads)."""
        name, step = h.target.name, h.current
        if step == events.WINDOW:
            control = now.control
            ref, against = (control, CONTROL) if control is not None else (h.before, BASELINE)
            ev = events.evidence_of(now.after, now.judged(), ref, against)
        else:
            ev = events.evidence_of(now.after)
        took = time.monotonic() - self.began.get(name, time.monotonic())
        timeout = self.timeout(step)
        self.emit(events.SCRAPE, host=name, phase=step, elapsed=took, timeout=timeout, evidence=ev)

    def steered(self, s: Steer, host: str | None, step: str, what: str) -> None:
        """The controller took steer `s`: for the run (`host` None: when first read), or on
        `host` at `step`, where it did `what`."""
        said = events.first_line(what)
        self.emit(events.STEER, host=host, phase=step or None, steer=_said(s), detail=said)

    def held(self, name: str, pause: Steer) -> None:
        """Host `name` waits before its start, held by `pause`: its phase is events.HELD."""
        self.began[name] = time.monotonic()
        self.emit(events.PHASE, host=name, phase=events.HELD, elapsed=0.0, steer=_said(pause))

    def done(self, result: HostResult) -> None:
        """A host's walk is over: its last steps ended, its verdict (`failed`: it never
        started a walk, e.g. no connection)."""
        r = result.rollout or {}
        phases = [
            (str(p["step"]), bool(p["ok"]), str(p.get("detail", "")), float(p["seconds"]))
            for p in r.get("phases") or []
        ]
        self._ended(result.target, phases)
        verdict = r.get("verdict") or "failed"
        said = events.first_line(result.error or "")
        reached = r.get("reached")
        self.emit(events.DONE, host=result.target, phase=reached, verdict=verdict, detail=said)

    def end(self, result: RunResult) -> None:
        """The run is over: the last event, then the files closed."""
        self.emit(events.END, ok=result.ok, verdict="ok" if result.ok else "not ok")
        self.quiet.set()
        if self.beater is not None:
            self.beater.join()
        with self.lock:
            for f in self.files:
                f.close()


def _said(s: Steer) -> events.Steered:
    return events.Steered(s.verb, s.seq, s.user, s.uid, s.at)


def open_stream(
    report: str, run: str, cfg: Settings, hosts: Sequence[str], sinks: Sequence[Sink]
) -> Stream:
    """The run's stream, its file beside the report made (a planted entry there: exit 2,
    before any host is contacted) and its start said."""
    file = LineFile(events_path(report), "the rollout's events")
    stream = Stream(run, cfg, [file, *sinks])
    stream.start(hosts)
    return stream


class Told:
    """The live report and the event stream, told together (the driver's one handle): as a
    host's walk begins (`begin`), as it begins each step (`step`), as a pause holds it before
    its start (`held`), as it ends (`ended`), and at the run's end (`close`); a steer taken
    goes to the stream alone (`steered`: the report lists it in the hosts it changed)."""

    def __init__(self, report: LiveReport, events: Stream) -> None:
        self.report = report
        self.events = events

    def begin(self, i: int, h: Host) -> None:
        h.seen = self.events.seen
        self.report.live[i] = h

    def step(self, h: Host) -> None:
        self.events.step(h)  # first: a watcher sees the step begin without the fsync's wait
        self.report.step(h)

    def held(self, i: int, pause: Steer) -> None:
        self.events.held(self.report.targets[i].name, pause)  # first, as in `step`
        self.report.hold(i, pause)

    def steered(self, s: Steer, host: str | None, step: str, what: str) -> None:
        self.events.steered(s, host, step, what)

    def ended(self, i: int, result: HostResult) -> HostResult:
        self.events.done(result)
        return self.report.ended(i, result)

    def hosts(self, why: str) -> list[HostResult]:
        return self.report.hosts(why)

    def close(self, result: RunResult) -> None:
        self.report.close(result)
        self.events.end(result)
