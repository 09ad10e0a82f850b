"""The controller's side of steering (`vpatch rollout pause|resume|promote|abort`): the run's
channel (patcher/rollout/channel.py) read where patcher/rollout/steer.py's decisions are
asked, and what each did to a host kept for its report and its journal.

Where it is read: before a host starts (driver: `Steering.hold`), before each step of a host
in flight (walk: `HostSteer.before`), between the calls of a health wait
(walk._step_health: `HostSteer.during`) and at every scrape of a window (walk._measure:
`HostSteer.look`). A steer that changed a host's walk is journaled there at once, as a note on
the walk (protocol.steer_entry), and its host's report names it (`steers`).

Every read goes through `Steering.state`, so that is where a new record is first taken: it is
told once there (`tell`, the run's event stream: patcher.rollout.stream.Told.steered), and
once more for each host a promote or an abort changed (`HostSteer._took`), so that a watcher
sees what the controller obeyed, not only what was written.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from patcher.agent import protocol
from patcher.errors import HostError
from patcher.rollout import steer
from patcher.rollout.channel import Channel
from patcher.rollout.decide import APPLY, BASELINE
from patcher.rollout.steer import Steer

POLL_S = 0.25  # how often a held host looks at the channel again
# Who is told of a steer taken: (the record, the host it changed or None for the run, the
# step it met there, what it did there).
Tell = Callable[[Steer, str | None, str, str], None]


class Aborted(HostError):
    """The run's abort, met in a window: the step fails with these words (walk records it as
    any failed step, and the way back follows)."""


@dataclass
class Held:
    """How a host's wait before its start ended: `stop` the abort that keeps it from starting,
    `interrupted` a Ctrl-C while it waited, `steers` the pauses and resumes that held it."""

    stop: Steer | None = None
    interrupted: bool = False
    steers: list[Steer] = field(default_factory=list)


def start(report: str, run: str, resume: bool) -> Steering:
    """The run's steering, its channel made (or taken again on --resume) next to `report`:
    UsageError (exit 2) when something else holds the name (channel.open_run)."""
    from patcher.rollout import channel

    return Steering(channel.open_run(report, run, resume))


class Steering:
    """The run's channel, shared by its hosts."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._warned = False
        self.tell: Tell | None = None  # set once the run's events are open (the driver)
        self._told = 0  # the newest seq told
        self._lock = threading.Lock()

    def state(self) -> steer.State:
        """What is in force; a channel refused since its start is said once (a warning), and
        each steer first read here is told (hosts read in threads: once in all)."""
        state = self.channel.state()
        if self.channel.refused and not self._warned:
            from patcher.output.lines import warning

            self._warned = True
            warning(self.channel.refused)
        if self.tell is not None and state.last > self._told:
            with self._lock:
                for s in steer.news(self.channel.records, self.channel.run, self._told):
                    self._told = max(self._told, s.seq)
                    self.tell(s, None, "", "")
        return state

    def hold(self, stop: threading.Event | None, waiting: Callable[[Steer], None]) -> Held:
        """Wait while the run is paused, before a host starts (`waiting(pause)` once per
        pause it waits on: the report says so). Returns at once when it may start."""
        held = Held()
        while True:
            state = self.state()
            action, why = steer.hold(state)
            if action == steer.GO:
                if held.steers and state.resumed is not None:
                    held.steers.append(state.resumed)
                return held
            assert why is not None
            if action == steer.STOP:
                held.stop = why
                return held
            if why not in held.steers:
                held.steers.append(why)
                waiting(why)
            if stop is not None and stop.wait(POLL_S):
                held.interrupted = True
                return held
            if stop is None:
                threading.Event().wait(POLL_S)

    def host(
        self,
        held: Held,
        first: str,
        run: str,
        specs: list[str],
        journal: Callable[[dict[str, Any]], None],
    ) -> HostSteer:
        """A host's view from its start (the promotes before now are not for it); `journal`
        sends one note to its journal (the pauses that held it go with its first step)."""
        h = HostSteer(self, steer.Seen(since=self.state().last), run, specs, journal)
        for s in held.steers:
            what = "held it before its first step" if s.verb == steer.PAUSE else "let it start"
            h.note(s, first, what)
        return h


class HostSteer:
    """One host in flight: what it took from the channel (`seen`), the promote it keeps the
    patch on, its report's `steers` and the notes its journal has yet to take (sent by
    `journal`, one agent call each, at the next look: the host's lease is held by then)."""

    def __init__(
        self,
        steering: Steering,
        seen: steer.Seen,
        run: str,
        specs: list[str],
        journal: Callable[[dict[str, Any]], None],
    ) -> None:
        self.steering = steering
        self.name = ""  # the host's, as the run's events name it (set by the driver)
        self.seen = seen
        self.run, self.specs, self.journal = run, specs, journal
        self.promoted: Steer | None = None
        self.effects: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []

    @property
    def steered(self) -> str:
        return self.seen.steered

    def note(self, s: Steer, step: str, what: str) -> None:
        """`s` touched the host at `step`: said in its report and its journal."""
        self.effects.append(steer.effect(s, step, what))
        entry = protocol.steer_entry(
            run=self.run,
            step=step,
            specs=self.specs,
            steer=s.to_json(),
            detail=f"{s.by()} at {s.at}: {what}",
        )
        self.pending.append(entry)

    def _flush(self) -> None:
        while self.pending:
            self.journal(self.pending.pop(0))

    def _took(self, s: Steer, step: str, what: str) -> None:
        """`s` changed this host's walk at `step`: taken (it changes it no more), noted, and
        told to the run's events."""
        from dataclasses import replace

        self.seen = replace(self.seen, steered=s.verb)
        self.note(s, step, what)
        tell = self.steering.tell
        if tell is not None:
            tell(s, self.name or None, step, what)

    def before(self, step: str) -> str:
        """ "" when `step` runs; else the detail it is recorded with, failed and not run."""
        action, s = steer.before_step(self.steering.state(), self.seen, step)
        if action != steer.GO and s is not None:
            then = "nothing was written: it stops" if step in (BASELINE, APPLY) else "it goes back"
            self._took(s, step, f"the {step} step was not run; {then}")
        self._flush()
        return "" if action == steer.GO or s is None else f"not run: aborted ({s.by()} at {s.at})"

    def during(self, step: str) -> None:
        """Between two calls of `step`'s wait (a health wait): Aborted raised when the run
        was aborted and this host, going forward, has not taken it yet (the step fails,
        the way back follows); a way back's wait goes on (steer.before_step decides both)."""
        action, s = steer.before_step(self.steering.state(), self.seen, step)
        if action == steer.GO or s is None:
            return
        self._took(s, step, f"the {step} wait was ended; it goes back")
        self._flush()
        raise Aborted(f"aborted ({s.by()} at {s.at}) in the {step} wait")

    def look(self, step: str, after: bool) -> bool:
        """At a scrape of the window of `step`: True when it ends now (promoted); Aborted
        raised when the run was aborted (the step fails)."""
        action, s = steer.at_look(self.steering.state(), self.seen, after)
        if action == steer.GO or s is None:
            return False
        if action == steer.STOP:
            then = "it goes back" if after else "nothing was written: it stops"
            self._took(s, step, f"the {step} window was ended; {then}")
            self._flush()
            raise Aborted(f"aborted ({s.by()} at {s.at}) in the window")  # its hint: the verdict's
        self.promoted = s
        self._took(s, step, "the window was ended and the patch kept, whatever the gates say")
        self._flush()
        return True
