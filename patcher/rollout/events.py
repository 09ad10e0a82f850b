"""A rollout's events: the one record of what the controller is doing, host by host, as it
does it. Pure (golden cases in tests/cases/rollout/events/).

Why: a window lasts minutes and a model load as long; the report is written at each step,
but between two steps it says nothing, so a terminal stayed silent and nobody could tell a
hung controller from a slow server. The controller (patcher.rollout.stream) emits an event
at each phase change and at every scrape of a measuring window; the live view, `--events`
and `vpatch rollout watch` all read these records and nothing else, so what a second
terminal shows is what the first one does.

Kinds, in the order a run emits them:
- `start`: the run began (its hosts, the controller's pid and node: a watcher tells a
  finished stream from a controller that died);
- `phase`: a host began a step (`phase`: the step's name), with its time limit (`timeout`:
  the restart's and the health wait's, the window's longest; None where vpatch sets none);
- `scrape`: a scrape inside the baseline or the after-window: the `evidence` so far (how
  many intervals, the acceptance and tokens/s, in the window the ratio against the
  reference and, per gate, where it stands: the decision if any);
- `ended`: a step ended (`ok`, its detail's first line, `elapsed` its seconds);
- `done`: a host's walk is over (`verdict`, `phase`: the step reached);
- `end`: the run is over (`ok`, `verdict`: `ok` or `not ok`): always the last event;
- `steer`, at any time: the controller took a steer written to the run's channel (`vpatch
  rollout pause|resume|promote|abort`; `steer`: the record, patcher.rollout.steer.Steer),
  said once when it is first read (no `host`), then once for each host a promote or an abort
  changed (`host`, `phase`: the step it met there, `detail`: what it did);
- `beat`, at any time: the controller said nothing else for BEAT_S seconds (a restart, a
  model load): it is alive. A watcher on another node cannot look for the controller's
  process; a stream silent for STALE_S is one whose controller is gone.

A host a pause holds before its start is in the phase HELD: a `phase` event whose `steer` is
the pause. It is no step: the journal's steps (STEPS) never name it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from patcher.agent import protocol
from patcher.serving.judging import Gate
from patcher.serving.measures import Measures

VERSION = 1
KINDS = ("start", "phase", "scrape", "ended", "done", "end", "steer", "beat")
START, PHASE, SCRAPE, ENDED, DONE, END, STEER, BEAT = KINDS
STEPS = protocol.ROLLOUT_STEPS
BASELINE, _APPLY, RESTART, HEALTH, WINDOW = STEPS[:5]
ROLLBACK_RESTART, ROLLBACK_HEALTH = STEPS[7:9]
HELD = "held"  # the phase of a host a pause holds before its start (no step of the journal)
BEAT_S = 15.0  # the longest a running controller's stream stays silent: a `beat` then
STALE_S = 4 * BEAT_S  # a stream silent this long: its controller is gone (three beats missed)
PAUSE, RESUME, PROMOTE, ABORT = protocol.STEER_VERBS

# Where a gate stands in a window not over yet: passed, failed on evidence, or still open.
PASS, FAIL, UNDECIDED = "pass", "fail", "undecided"

# Bounds on a line a watcher reads: the event file is the controller's, but `watch` takes a
# path from its caller, and nothing read from a file may cost unbounded memory or screen.
MAX_LINE = 64 * 1024
MAX_TEXT = 400
MAX_HOSTS = 10_000


class BadEvent(ValueError):
    """A line that is not one of these records (`vpatch rollout watch` says which)."""


@dataclass(frozen=True)
class GateSoFar:
    """One gate in a window not over yet: its value against its threshold, and whether it
    already passed or failed on the evidence (`n`: the evidence's count, when it has one)."""

    name: str
    value: float | None
    threshold: float
    state: str  # PASS | FAIL | UNDECIDED
    n: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": _round(self.value),
            "threshold": self.threshold,
            "state": self.state,
            "n": self.n,
        }


@dataclass(frozen=True)
class Evidence:
    """A measuring window so far: `n` intervals over `seconds`, the drafts, acceptance and
    tokens/s seen; in the after-window, tokens/s over the reference's (`ratio`, `against`:
    baseline or control), each gate and the `decision` they add up to (None in the
    baseline, which judges nothing)."""

    n: int
    seconds: float
    drafts: float
    acceptance: float | None
    tokens_per_s: float | None
    ratio: float | None = None
    against: str | None = None
    decision: str | None = None
    gates: tuple[GateSoFar, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "seconds": round(self.seconds, 3),
            "drafts": self.drafts,
            "acceptance": _round(self.acceptance),
            "tokens_per_s": _round(self.tokens_per_s),
            "ratio": _round(self.ratio),
            "against": self.against,
            "decision": self.decision,
            "gates": [g.to_json() for g in self.gates],
        }


@dataclass(frozen=True)
class Steered:
    """A steer as an event carries it: the record of the run's channel the controller took
    (patcher.rollout.steer.Steer: its verb, its `seq` there, who wrote it and when)."""

    verb: str
    seq: int
    user: str
    uid: int
    at: str  # when it was written (UTC, ISO 8601), not when it was read

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class Event:
    """One event (the module's docstring says the kinds). `at`: UTC, ISO 8601 with
    milliseconds and `Z`; `elapsed`: seconds since the host's current phase began (an
    `ended` event: the step's whole time)."""

    at: str
    run: str
    kind: str
    host: str | None = None
    phase: str | None = None
    elapsed: float | None = None
    timeout: float | None = None
    ok: bool | None = None
    detail: str = ""
    evidence: Evidence | None = None
    verdict: str | None = None
    hosts: tuple[str, ...] = ()
    pid: int | None = None
    node: str | None = None
    steer: Steered | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"v": VERSION, "at": self.at, "run": self.run, "kind": self.kind}
        more: dict[str, Any] = {
            "host": self.host,
            "phase": self.phase,
            "elapsed": None if self.elapsed is None else round(self.elapsed, 3),
            "timeout": self.timeout,
            "ok": self.ok,
            "detail": self.detail or None,
            "evidence": self.evidence.to_json() if self.evidence else None,
            "verdict": self.verdict,
            "hosts": list(self.hosts) or None,
            "pid": self.pid,
            "node": self.node,
            "steer": self.steer.to_json() if self.steer else None,
        }
        out.update({k: v for k, v in more.items() if v is not None})
        return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def first_line(text: str) -> str:
    """What an event carries of a long detail: its first line, at most MAX_TEXT characters."""
    line = (text.splitlines() or [""])[0]
    return line if len(line) <= MAX_TEXT else line[: MAX_TEXT - 1] + "…"


# ---------------------------------------------------------------------------------------------
# What an event says


def timeout_of(
    step: str, *, window: float, max_window: float | None, restart: float, health: float
) -> float | None:
    """A step's time limit as the walk applies it: the restart's and the health wait's
    options, the baseline's window (it may end sooner, at --min-drafts), the after-window's
    longest (--max-window when an undecided window may extend); None: vpatch sets none."""
    if step == BASELINE:
        return window
    if step == WINDOW:
        return max(window, max_window or 0.0)
    if step in (RESTART, ROLLBACK_RESTART):
        return restart
    if step in (HEALTH, ROLLBACK_HEALTH):
        return health
    return None


def evidence_of(
    so_far: Measures,
    judged: Sequence[Gate] | None = None,
    reference: Measures | None = None,
    against: str | None = None,
) -> Evidence:
    """A window so far as an event carries it. `judged`: its gates judged with the window
    not over (judging.judge, last=False; None in the baseline); `reference`: what the
    tokens/s ratio is taken against (the baseline's window, or the control hosts')."""
    ratio = None
    ref = reference.tokens_per_s if reference is not None else None
    if so_far.tokens_per_s is not None and ref:
        ratio = so_far.tokens_per_s / ref
    gates = tuple(_gate(g) for g in judged or ())
    return Evidence(
        n=len(so_far.samples),
        seconds=so_far.seconds,
        drafts=so_far.drafts,
        acceptance=so_far.acceptance_rate,
        tokens_per_s=so_far.tokens_per_s,
        ratio=ratio if judged is not None else None,
        against=against if judged is not None and ratio is not None else None,
        decision=None if judged is None else decision_of(gates),
        gates=gates,
    )


def _gate(g: Gate) -> GateSoFar:
    state = UNDECIDED if g.pending else PASS if g.ok else FAIL
    return GateSoFar(g.name, g.value, g.threshold, state, g.evidence.n if g.evidence else None)


def decision_of(gates: Sequence[GateSoFar]) -> str:
    """What a window's gates add up to so far: failed as soon as one has, passed once all
    have, else undecided (no gate set: passed, as the gates step says)."""
    states = {g.state for g in gates}
    if FAIL in states:
        return FAIL
    return UNDECIDED if UNDECIDED in states else PASS


# ---------------------------------------------------------------------------------------------
# Reading an event back (a watcher's input)


def from_json(doc: object) -> Event:
    """The event a JSON object stands for, checked (kinds, types, bounds): BadEvent else."""
    if not isinstance(doc, Mapping) or doc.get("v") != VERSION:
        raise BadEvent(f"not a version-{VERSION} rollout event")
    kind = doc.get("kind")
    if kind not in KINDS:
        raise BadEvent(f"unknown event kind {str(kind)[:40]!r}")
    hosts = doc.get("hosts") or []
    if not isinstance(hosts, list) or len(hosts) > MAX_HOSTS:
        raise BadEvent("`hosts` is not a list of host names")
    steered = _steered(doc.get("steer"))
    if kind == STEER and steered is None:
        raise BadEvent("a `steer` event without its `steer`")
    return Event(
        at=_text(doc, "at", need=True),
        run=_text(doc, "run", need=True),
        kind=str(kind),
        host=_text(doc, "host") or None,
        phase=_text(doc, "phase") or None,
        elapsed=_number(doc.get("elapsed")),
        timeout=_number(doc.get("timeout")),
        ok=_flag(doc.get("ok")),
        detail=_text(doc, "detail"),
        evidence=_evidence(doc.get("evidence")),
        verdict=_text(doc, "verdict") or None,
        hosts=tuple(_bounded(h, "hosts") for h in hosts),
        pid=_integer(doc.get("pid")),
        node=_text(doc, "node") or None,
        steer=steered,
    )


def _text(doc: Mapping[str, Any], key: str, need: bool = False) -> str:
    v = doc.get(key)
    if v is None and not need:
        return ""
    return _bounded(v, key)


def _bounded(v: object, key: str) -> str:
    if not isinstance(v, str) or len(v) > MAX_TEXT:
        raise BadEvent(f"`{key}` is not a string of at most {MAX_TEXT} characters")
    return v


def _number(v: object) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadEvent(f"{str(v)[:40]!r} is not a number")
    return float(v)


def _integer(v: object) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadEvent(f"{str(v)[:40]!r} is not a whole number")
    return v


def _flag(v: object) -> bool | None:
    if v is not None and not isinstance(v, bool):
        raise BadEvent(f"{str(v)[:40]!r} is not true or false")
    return v


def _evidence(v: object) -> Evidence | None:
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise BadEvent("`evidence` is not an object")
    gates = v.get("gates") or []
    if not isinstance(gates, list) or len(gates) > 64:
        raise BadEvent("`evidence.gates` is not a list of gates")
    return Evidence(
        n=_integer(v.get("n")) or 0,
        seconds=_number(v.get("seconds")) or 0.0,
        drafts=_number(v.get("drafts")) or 0.0,
        acceptance=_number(v.get("acceptance")),
        tokens_per_s=_number(v.get("tokens_per_s")),
        ratio=_number(v.get("ratio")),
        against=_text(v, "against") or None,
        decision=_text(v, "decision") or None,
        gates=tuple(_gate_of(g) for g in gates),
    )


def _gate_of(g: object) -> GateSoFar:
    if not isinstance(g, Mapping):
        raise BadEvent("a gate in `evidence.gates` is not an object")
    return GateSoFar(
        name=_text(g, "name", need=True),
        value=_number(g.get("value")),
        threshold=_number(g.get("threshold")) or 0.0,
        state=_text(g, "state", need=True),
        n=_number(g.get("n")),
    )


def _steered(v: object) -> Steered | None:
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise BadEvent("`steer` is not an object")
    verb = v.get("verb")
    if verb not in protocol.STEER_VERBS:
        raise BadEvent(f"unknown steer {str(verb)[:40]!r}")
    seq, uid = _integer(v.get("seq")), _integer(v.get("uid"))
    if seq is None or uid is None:
        raise BadEvent("a `steer` without its `seq` and `uid`")
    user, at = _text(v, "user", need=True), _text(v, "at", need=True)
    return Steered(str(verb), seq, user, uid, at)
