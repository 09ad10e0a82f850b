"""Steering a running rollout (`vpatch rollout pause|resume|promote|abort REPORT`): the record
the operator writes and the controller reads, and every decision made from it, pure (golden
cases in tests/cases/rollout/steer/). The channel the records travel through, next to the
report, and its trust checks are patcher/rollout/channel.py's; the controller's use of them,
patcher/rollout/steering.py's.

A run's channel is a log of records, one JSON object a line, each with the run it steers and a
sequence number. The controller writes `start` when it begins (again, on --resume) and `end`
when it closes; the operator writes the four verbs. What is in force is folded from the log:

- pause / resume: the newest of the two says whether hosts may start. A paused run holds each
  host before its first step; hosts in flight go on (their windows are still judged).
- promote: an event for the hosts in flight when it was written (those whose walk began
  before it): each one's window after the patch ends at its next look, and the host keeps
  the patch whatever the gates said (verdict `promoted`, the gates as they stood recorded).
  A host that starts later is judged as usual.
- abort: final for the run. No host starts; a host in flight fails its current window or
  health wait or does not begin its next forward step, and takes the way back (verdict
  `aborted`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from patcher.agent import protocol
from patcher.rollout import decide

PAUSE, RESUME, PROMOTE, ABORT = protocol.STEER_VERBS
VERBS = protocol.STEER_VERBS
START, END = "start", "end"  # the controller's own records: it began (again), it closed
KINDS = (*VERBS, START, END)

MAX_BYTES = 1 << 20  # a channel longer than this is not read (a run writes a few lines)
MAX_FIELD = protocol.STEER_USER_MAX


@dataclass(frozen=True)
class Steer:
    """One record of a run's channel: who wrote what, when, in which order (`seq`, from 1).
    `pid`: a `start` record's controller (0 in every other record)."""

    run: str
    verb: str
    seq: int
    uid: int
    user: str
    at: str  # UTC, ISO 8601
    pid: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run": self.run,
            "verb": self.verb,
            "seq": self.seq,
            "uid": self.uid,
            "user": self.user,
            "at": self.at,
        }
        if self.pid:
            out["pid"] = self.pid
        return out

    def by(self) -> str:
        """`abort 3 by alice (uid 1000)`: the record in the words a report and a note use."""
        return f"{self.verb} {self.seq} by {self.user} (uid {self.uid})"


def _count(obj: dict[str, Any], key: str) -> int:
    n = obj.get(key, 0)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{key} is not a count")
    return n


def record_of(obj: Any) -> Steer:
    """A record from its JSON object. ValueError (why) when it is not one: the channel is the
    operator's file, and a line that is not a record costs that line only."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    run, verb = obj.get("run"), obj.get("verb")
    if not isinstance(run, str) or not 0 < len(run) <= 64 or not run.isalnum():
        raise ValueError("run is not an id")
    if verb not in KINDS:
        raise ValueError(f"unknown verb {verb!r}")
    for key in ("user", "at"):
        if not isinstance(obj.get(key), str) or len(obj[key]) > MAX_FIELD:
            raise ValueError(f"{key} is not a short string")
    seq = _count(obj, "seq")
    if seq < 1:
        raise ValueError("seq is not a count from 1")
    return Steer(run, verb, seq, _count(obj, "uid"), obj["user"], obj["at"], _count(obj, "pid"))


def parse(raw: bytes) -> tuple[list[Steer], list[str]]:
    """The records of a channel's bytes, in order, and a problem line for each line that is
    not one (a torn last line, a write cut short, is skipped without a word)."""
    import json

    out: list[Steer] = []
    problems: list[str] = []
    lines = raw.split(b"\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(record_of(json.loads(line)))
        except ValueError as exc:  # json's errors are ValueErrors too
            if n < len(lines):
                problems.append(f"steering channel line {n} ignored: {exc}")
    return out, problems


@dataclass(frozen=True)
class State:
    """What a run's channel says is in force for `run` (records of other runs ignored)."""

    run: str
    started: bool = False  # a controller of this run wrote `start`
    live: bool = False  # ... and has not written `end` since
    pid: int = 0  # the newest controller's
    last: int = 0  # the newest seq of any record (the next one writes last + 1)
    paused: Steer | None = None  # the pause in force
    resumed: Steer | None = None  # the newest resume
    aborted: Steer | None = None  # the run's abort (the first one: it is final)
    promotes: tuple[Steer, ...] = ()  # every promote, oldest first


def fold(records: Sequence[Steer], run: str) -> State:
    """The state of `run` after `records`, in the order they were written."""
    st = State(run, last=max((r.seq for r in records), default=0))
    fields: dict[str, Any] = {}
    for r in records:
        if r.run != run:
            continue
        if r.verb == START:
            fields.update(started=True, live=True, pid=r.pid)
        elif r.verb == END:
            fields.update(live=False)
        elif r.verb == PAUSE:
            fields.update(paused=r)
        elif r.verb == RESUME:
            fields.update(paused=None, resumed=r)
        elif r.verb == ABORT:
            fields.setdefault("aborted", r)
        else:
            fields["promotes"] = (*fields.get("promotes", ()), r)
    from dataclasses import replace

    return replace(st, **fields)


def news(records: Sequence[Steer], run: str, since: int) -> list[Steer]:
    """The steers of `run` written after seq `since`, oldest first: what a controller that
    took every record up to `since` has yet to say it took (its own `start` and `end` are no
    steers)."""
    return [r for r in records if r.run == run and r.verb in VERBS and r.seq > since]


# ---------------------------------------------------------------------------------------------
# The operator's side: may this steer be written?


def refusal(state: State, verb: str) -> tuple[str, str] | None:
    """(error, hint) when `verb` may not be written to the run's channel now, else None."""
    run = state.run
    if verb not in VERBS:
        return f"{verb!r} is not a steer", "one of: " + ", ".join(VERBS)
    said = _run_refusal(state)
    if said is not None:
        return said
    if verb == PAUSE and state.paused is not None:
        return (
            f"rollout {run} is already paused ({state.paused.by()} at {state.paused.at})",
            "`vpatch rollout resume REPORT` lets it start its next host",
        )
    if verb == RESUME and state.paused is None:
        return f"rollout {run} is not paused", "`vpatch rollout pause REPORT` holds it"
    return None


def _run_refusal(state: State) -> tuple[str, str] | None:
    """(error, hint) when the run takes no steer at all now: none of it recorded, ended,
    or aborted already."""
    run = state.run
    if not state.started:
        return (
            f"the steering channel has no record of rollout {run}",
            "give the report of a running rollout (its --report, or the file it named on "
            "stderr at its start)",
        )
    if not state.live:
        return (
            f"rollout {run} has ended: nothing to steer (its report is final)",
            "a rollout stopped by Ctrl-C goes on with `vpatch rollout ... --resume REPORT`; "
            "steer it once that runs",
        )
    if state.aborted is not None:
        return (
            f"rollout {run} is being aborted ({state.aborted.by()} at {state.aborted.at}): "
            "nothing changes that",
            "wait for it to end: `vpatch rollout watch REPORT` or its report",
        )
    return None


# ---------------------------------------------------------------------------------------------
# The controller's side

GO = "go"  # start the host, run the step, go on with the window
WAIT = "wait"  # a host about to start is held (paused)
STOP = "stop"  # the host does not start (aborted); a step is not run; a window fails
END_WINDOW = "end_window"  # the window ends now and the host keeps the patch (promoted)


def hold(state: State) -> tuple[str, Steer | None]:
    """A host about to start: GO, WAIT while the run is paused, STOP once it is aborted."""
    if state.aborted is not None:
        return STOP, state.aborted
    if state.paused is not None:
        return WAIT, state.paused
    return GO, None


@dataclass(frozen=True)
class Seen:
    """What a host in flight took from the channel so far: `since` the newest seq when its
    walk began (a promote after it is for this host), `steered` the verb that changed its
    walk ("" none yet)."""

    since: int = 0
    steered: str = ""


def before_step(state: State, seen: Seen, step: str) -> tuple[str, Steer | None]:
    """A host in flight about to begin `step`: STOP (the step is recorded failed, not run:
    the step machine then takes the way back, or ends a host that wrote nothing) when the run
    was aborted and the host has not yet taken the abort and is still going forward; else GO.
    A host on its way back goes on with it: that is what the abort asks."""
    if state.aborted is None or seen.steered == ABORT:
        return GO, None
    if step in (decide.ROLLBACK, decide.ROLLBACK_RESTART, decide.ROLLBACK_HEALTH):
        return GO, None
    return STOP, state.aborted


def at_look(state: State, seen: Seen, after: bool) -> tuple[str, Steer | None]:
    """A look of a window (each scrape): STOP (the window step fails: the abort) for a host
    that has not taken the run's abort; END_WINDOW for the window after the patch (`after`)
    of a host a promote written since its walk began is for; else GO."""
    if state.aborted is not None and seen.steered != ABORT:
        return STOP, state.aborted
    if after and seen.steered == "":
        mine = [p for p in state.promotes if p.seq > seen.since]
        if mine:
            return END_WINDOW, mine[0]
    return GO, None


def verdict(base: str, steered: str) -> str:
    """The host's verdict, given the verb that changed its walk: an aborted host that went
    back (or wrote nothing) is ABORTED, a promoted host that kept the patch PROMOTED; a way
    back that failed stays ATTENTION, and a host the steer did not change keeps its own."""
    if steered == ABORT and base in (
        decide.ROLLED_BACK,
        decide.NOT_ENOUGH_EVIDENCE,
        decide.UNTOUCHED,
        decide.NOT_APPLIED,
    ):
        return decide.ABORTED
    if steered == PROMOTE and base == decide.KEPT:
        return decide.PROMOTED
    return base


def promoted_gates(steer: Steer, ok: bool, detail: str) -> str:
    """The gates step's line of a promoted host: kept on the operator's word, with what the
    gates said of the window as it stood."""
    said = "passed" if ok else "would not have kept it"
    return f"promoted ({steer.by()} at {steer.at}): the gates on the window so far {said}: {detail}"


def effect(steer: Steer, step: str, verb_did: str) -> dict[str, Any]:
    """A host's report entry for a steer that touched it: the record and what it did there."""
    return {**steer.to_json(), "step": step, "effect": verb_did}
