"""The rollout lease's decisions, pure (stdlib only, Python 3.9+; table tests in
tests/unit/test_rollout_lease.py). agent/lease.py reads the lease file and the clock, asks
these functions, and writes what they return, under the environment's lock.

Why a lease: two operators rolled out on one host at once. B's restart landed inside A's
measuring window, A's good back-port was rolled back for a 503, and B's baseline measured A's
patched server. A rollout is a walk of many minutes over several agent calls, longer than any
lock a single request may hold; so a rollout holds a lease instead: a file in the state dir
naming its run, its controller (`who`), since when, and its last heartbeat. A second rollout
on the host, and an apply or rollback of the same specs, are refused while it is held, with
the holder named.

A lease whose controller died must not block the host for ever, nor be mistaken for a live
one. It is stale when its holder said it stopped (`parked`: a Ctrl-C), when its promised next
beat is overdue (`beat` + `ttl`, both on the host's clock), or when the agent session that
took it is gone (`agent`: the pid and start time of an agent that lives as long as the
controller's session; the kernel's word, without waiting for the ttl). Only `--resume` of
that same run takes a stale lease over: the run's journal says where its hosts got to, and a
new rollout would walk over a host left half-way.
"""

from __future__ import annotations

import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

    Lease = Dict[str, Any]

# What a lease request came to (the answer's "result"). Granted:
TAKEN = "taken"  # there was none: the caller holds it now
TAKEN_OVER = "taken_over"  # --resume of the holder's run, whose controller is gone
RENEWED = "renewed"  # the holder's beat (or its take again)
PARKED = "parked"  # the holder stopped before the walk's end: stale at once, still named
RELEASED = "released"  # `vpatch rollout release`: the run's lease, its controller gone, removed
GRANTED = (TAKEN, TAKEN_OVER, RENEWED, PARKED, RELEASED)
ABSENT = "absent"  # a release where no lease is held: nothing to do, nothing written
# Refused (nothing written):
HELD = "held"  # another run's rollout holds it and is alive
STALE = "stale"  # another run's, its controller gone: `--resume` of that run takes it over
LIVE = "live"  # this run's, and its controller still beats (a --resume too early, or twice)
LOST = "lost"  # a beat or park by a controller that no longer holds it (taken over, removed)
REFUSED = (HELD, STALE, LIVE, LOST)

MAX_FIELD = 256  # characters of `who` and of a spec id a lease keeps
# A promise vpatch makes is bounded (patcher.rollout.lease.ttl_for: at most a day's restart
# timeout and two minutes); a beat is stamped with the host's own clock. A lease that promises
# more, or whose beat lies ahead of that clock (the clock went back, or the file was forged),
# would never go stale: it is held to be stale, so a lost controller never blocks a host.
MAX_TTL = 90000.0
MAX_SKEW = 300.0  # seconds a beat may lie ahead of the host's clock (a clock set back a little)


def lease_error(lease: Any) -> str:
    """Why `lease` is not a lease vpatch wrote ("" when it is one). The file is in a directory
    the environment's owner may write: its words reach an operator's terminal and decide
    whether a host is refused, so its shape is checked before any of it is used."""
    if not isinstance(lease, dict):
        return "not a JSON object"
    run = lease.get("run")
    if not isinstance(run, str) or not run.isalnum() or len(run) > 64:
        return "its run is not an id"
    for key in ("who", "since", "heartbeat"):
        v = lease.get(key)
        if not isinstance(v, str) or len(v) > MAX_FIELD:
            return "its %s is not a short text" % key
    specs = lease.get("specs")
    if not isinstance(specs, list) or not all(
        isinstance(s, str) and len(s) <= MAX_FIELD for s in specs
    ):
        return "its specs are not a list of ids"
    for key in ("beat", "ttl"):
        v = lease.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return "its %s is not a number" % key
        if v < 0:
            return "its %s is negative" % key
    agent = lease.get("agent")
    if agent is not None and (
        not isinstance(agent, dict)
        or isinstance(agent.get("pid"), bool)
        or not isinstance(agent.get("pid"), int)
        or agent["pid"] <= 0
        or not isinstance(agent.get("start"), str)
    ):
        return "its agent is not a pid and a start time"
    if not isinstance(lease.get("parked"), bool):
        return "its parked is not true or false"
    return ""


def plausible(lease: Lease, now: float) -> bool:
    """Whether the lease's beat and ttl are ones vpatch makes: a promise of at most MAX_TTL,
    a beat not ahead of the host's clock (`now`) by more than MAX_SKEW."""
    return bool(lease["ttl"] <= MAX_TTL and lease["beat"] <= now + MAX_SKEW)


def is_stale(lease: Lease, now: float, alive: Optional[bool]) -> bool:
    """Whether the lease's controller is gone: it said so (parked), its next beat is overdue
    (`now`: the host's clock, as the beat's), the session agent that holds it is dead
    (`alive` False; None: not known, the beat alone decides), or its beat and ttl are not
    ones vpatch makes (`plausible`): a promise that never runs out keeps no host."""
    return (
        bool(lease["parked"])
        or not plausible(lease, now)
        or now > lease["beat"] + lease["ttl"]
        or alive is False
    )


def decide(
    action: str, lease: Optional[Lease], req: Dict[str, Any], now: float, alive: Optional[bool]
) -> str:
    """What a request (`action` take, beat, park or release; `req`'s run, who and resume)
    comes to on the lease as it is (`lease` None: there is none). A release gives up the
    named run's lease only once its controller is gone (stale): while it lives, LIVE."""
    run, who = req.get("run"), req.get("who")
    if action != "take":
        return _held_by_me(action, lease, req, now, alive)
    if lease is None:
        return TAKEN
    stale = is_stale(lease, now, alive)
    if lease["run"] != run:
        return STALE if stale else HELD
    if lease["who"] == who:
        return RENEWED
    if not stale:
        return LIVE
    return TAKEN_OVER if req.get("resume") else STALE


def _held_by_me(
    action: str, lease: Optional[Lease], req: Dict[str, Any], now: float, alive: Optional[bool]
) -> str:
    """beat and park (the holder's own: LOST when it no longer holds it), and release (by a
    person, for a run whose controller is provably gone: only that run's, only once stale)."""
    run = req.get("run")
    if action == "release":
        if lease is None:
            return ABSENT
        if lease["run"] != run:
            return HELD  # another run's lease is never released by naming this one
        return RELEASED if is_stale(lease, now, alive) else LIVE
    if lease is None or lease["run"] != run or lease["who"] != req.get("who"):
        return LOST
    return PARKED if action == "park" else RENEWED


def record(
    result: str,
    lease: Optional[Lease],
    req: Dict[str, Any],
    now: float,
    stamp: str,
    agent: Optional[Dict[str, Any]],
) -> Lease:
    """The lease to write for a granted `result` (`stamp`: `now` as UTC ISO 8601; `agent`:
    the answering agent's pid and start time when the request says it is a session's)."""
    ttl = float(req.get("ttl") or 0)
    if result == PARKED:
        assert lease is not None
        return dict(lease, parked=True, heartbeat=stamp, beat=now, ttl=0.0)
    fresh = {
        "run": req["run"],
        "who": str(req["who"])[:MAX_FIELD],
        "specs": [str(s)[:MAX_FIELD] for s in req.get("specs") or []],
        "since": stamp,
        "heartbeat": stamp,
        "beat": now,
        "ttl": ttl,
        "agent": agent,
        "parked": False,
    }
    if result == TAKEN:
        return fresh
    assert lease is not None
    if result == TAKEN_OVER:
        return dict(fresh, since=lease["since"], taken_over={"from": lease["who"], "at": stamp})
    return dict(lease, heartbeat=stamp, beat=now, ttl=ttl, agent=agent, parked=False)


def blocks(
    lease: Optional[Lease], run: Optional[str], specs: List[str], now: float, alive: Optional[bool]
) -> bool:
    """Whether a commit (apply, rollback) of `specs` by `run` (None: not a rollout's) must be
    refused: a live rollout of another run holds the lease for one of these specs. A stale
    lease blocks no commit: its controller is gone, and a person acting by hand (a rollback)
    must not be kept from the host by it."""
    if lease is None or lease["run"] == run or is_stale(lease, now, alive):
        return False
    return bool(set(lease["specs"]) & set(specs))


def releases(lease: Optional[Lease], release: Any) -> bool:
    """Whether `release` ({"run", "who"}, sent with a walk's last step) is the holder's."""
    return (
        lease is not None
        and isinstance(release, dict)
        and lease["run"] == release.get("run")
        and lease["who"] == release.get("who")
    )


def describe(lease: Lease, age: float) -> str:
    """The holder in words, for an operator: run, controller, since, and its last heartbeat
    `age` seconds ago (on the host's clock: the controller's may differ)."""
    age = max(0.0, age)
    return "rollout run %s (%s; since %s, last heartbeat %.0f s ago%s)" % (
        lease["run"],
        lease["who"],
        lease["since"],
        age,
        ", stopped" if lease["parked"] else "",
    )
