"""`vpatch rollout`'s lease, the controller's side: take it before a host's first step,
beat while the host walks, give it up with the walk's last step (or park it when the walk
stops early), and the words for a host whose lease is refused. The host decides and keeps
the lease (patcher/agent/lease.py, patcher/agent/leasing.py); what is decided here is pure:
how long each step may go without a beat (`ttl_for`) and what a refusal says (`refusal`).

A beat promises the next one within `ttl` seconds, on the host's clock. A step is one agent
call, or a loop of short ones: the beat before it covers the longest call it makes (the
restart command's timeout, a health call's wait) plus GRACE; the windows' and the health
loop's short calls beat every BEAT_S between them. A controller that dies stops beating; its
lease goes stale when the promise runs out, or at once when the agent session that holds it
ends (SSH: the session dies with the controller).
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from patcher.agent import leasing, protocol

if TYPE_CHECKING:
    from patcher.rollout.settings import Settings
    from patcher.run.exchange import RunContext
    from patcher.transports import Transport

GRACE = 60.0  # seconds a beat's promise adds to the longest call the step makes
BEAT_S = 10.0  # between two beats within a step of short calls (windows, the health loop)
ENGINE_S = 1800.0  # apply, rollback: a full-level verify imports torch and vLLM, twice
WAIT_POLL_S = 1.0  # a --resume waiting for its own run's lease to go stale asks this often
LEASE_CALL = 120.0  # seconds one lease request may take (it waits on the environment's lock)
# What to check when the agent refuses a lease request and its error kind names nothing.
HINT = "run `vpatch status` on the host"


def who() -> str:
    """The controller, as a person reads it: user@machine pid N."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


def ttl_for(step: str, cfg: Settings, call_s: float = 60.0) -> float:
    """How long `step` may run before the next beat: its longest single agent call, plus
    GRACE. `call_s`: the longest health or scrape call (rolloutrun.HEALTH_CALL)."""
    if step in ("restart", "rollback_restart"):
        return cfg.restart_timeout + 60 + GRACE  # the agent call's own timeout: t + 60
    if step in ("apply", "rollback"):
        return ENGINE_S + GRACE
    return max(call_s, BEAT_S) + 60 + GRACE  # one health call (wait + 60) or a scrape


def live_wait(holder: Any, age: float) -> float:
    """How long a --resume waits for its own run's lease whose controller still beats: what
    that controller's last beat promised (its ttl less the beat's age), and a poll more. A
    controller that is really gone lets it go stale within that; one that beats on is a
    second controller of the run, refused then."""
    if holder is None or leasing.lease_error(holder):
        return 0.0
    return min(ENGINE_S + GRACE, max(0.0, float(holder["ttl"]) - age)) + 2 * WAIT_POLL_S


class Refused(Exception):
    """The host's lease is not ours to take: `error` and `hint`, the holder named."""

    def __init__(self, error: str, hint: str) -> None:
        super().__init__(error)
        self.error, self.hint = error, hint


class Lost(Exception):
    """A beat found the lease no longer ours (taken over by a --resume of this run after our
    beats ran out, or removed by hand): this controller must not touch the host again."""


def refusal(result: str, holder: Any, run: str, now_age: float) -> tuple[str, str]:
    """(error, hint) of a refused take (the report prefixes the host's name): the holder
    named, from the host's answer (`holder`: the lease as the host sent it, checked here
    again: the host may lie)."""
    why = leasing.lease_error(holder) if holder is not None else "no lease"
    if why:
        return (
            f"the host refused the rollout lease ({result}) and sent no lease "
            f"vpatch wrote ({why}); nothing was changed",
            "check the host's state dir (`vpatch status`)",
        )
    named = leasing.describe(holder, now_age)
    if result == leasing.HELD:
        return (
            f"{named} holds this host's rollout lease: one rollout per host at a "
            "time; nothing was changed",
            "wait for that rollout to end (its controller is named above), then run this again",
        )
    if result == leasing.STALE:
        return (
            f"{named} holds this host's rollout lease, and its controller is gone; "
            "nothing was changed",
            f"`vpatch rollout` with that run's arguments and `--resume REPORT` (run "
            f"{holder['run']}'s report: its --report, else rollouts/{holder['run']}.json in "
            "the vpatch state dir of the machine that ran it) takes the lease over and "
            "finishes its walk, or ends it there if the host changed since; without the "
            f"report, `vpatch rollout release HOST --run {holder['run']}` gives the lease up",
        )
    if result == leasing.LIVE:
        return (
            f"{named} still holds this run's lease and beats: another controller "
            f"of run {run} is running; nothing was changed",
            "stop the other controller (or let it finish), then --resume again",
        )
    return (
        f"the rollout lease was refused ({result}); nothing was changed",
        "run `vpatch status` on the host",
    )


def released_words(result: str, holder: Any, run: str, age: float) -> tuple[bool, str, str]:
    """(done, what happened, hint) of `vpatch rollout release --run RUN` on one host, from the
    host's answer (`holder`: the lease as it is there now, checked again: the host may lie)."""
    if result == leasing.RELEASED:
        return True, f"run {run}'s rollout lease released (its controller was gone); journaled", ""
    if result == leasing.ABSENT:
        return True, "no rollout lease is held here: nothing to release", ""
    if holder is None or leasing.lease_error(holder):
        why = leasing.lease_error(holder) if holder is not None else "no lease"
        return False, f"the release was refused ({result}; {why}); nothing was changed", HINT
    named = leasing.describe(holder, age)
    if result == leasing.LIVE:
        return (
            False,
            f"{named} still lives (it beats, or its session agent runs); nothing was changed",
            "stop that controller (or let it finish); a lease is released only once its "
            "controller is gone",
        )
    return (
        False,
        f"{named} holds this host's rollout lease, not run {run}; nothing was changed",
        f"give --run {holder['run']} to release that run's lease once its controller is gone",
    )


@dataclass
class Lease:
    """One host's lease, as the controller holds it."""

    transport: Transport
    run: str
    specs: list[str]
    state_dir: str | None
    session: bool
    ctx: RunContext | None = None  # the rollout's run: its lease requests are exchanges of it
    who: str = field(default_factory=who)
    beaten: float = -1.0  # the controller's monotonic time of the last granted beat
    promised: float = 0.0  # the ttl that beat promised

    def _ask(self, action: str, ttl: float, resume: bool = False) -> dict[str, Any]:
        req = protocol.lease_request(
            action, self.run, self.who, self.specs, ttl, self.state_dir, resume, self.session
        )
        from patcher.run import exchange

        # An error answer is an AgentError of the agent's words alone: the report names the host.
        return exchange.call(
            self.transport, req, self.ctx, timeout=LEASE_CALL, refused="", hint=HINT
        )

    def take(self, ttl: float, resume: bool = False) -> str:
        """Take the host's lease (what it came to: leasing.TAKEN ...). With `resume`, this
        run's lease whose controller still beats is waited for (`live_wait`), then taken
        over; anything else refused raises Refused."""
        deadline: float | None = None
        while True:
            res = self._ask(protocol.LEASE_TAKE, ttl, resume)
            result = str(res.get("result"))
            if res.get("granted"):
                self.beaten, self.promised = time.monotonic(), ttl
                return result
            if result == leasing.LIVE and resume:
                wait = live_wait(res.get("holder"), float(res.get("age") or 0))
                if deadline is None:
                    deadline = time.monotonic() + wait
                    from patcher.output import progress

                    progress.say(
                        f"{self.transport.target}: run {self.run}'s lease was beaten "
                        f"{float(res.get('age') or 0):.0f} s ago: waiting up to {wait:.0f} s "
                        "for its old controller to be gone"
                    )
                if time.monotonic() < deadline:
                    time.sleep(WAIT_POLL_S)
                    continue
            age = float(res.get("age") or 0)
            error, hint = refusal(result, res.get("holder"), self.run, age)
            raise Refused(error, hint)

    def beat(self, ttl: float, force: bool = True) -> None:
        """Promise the next beat within `ttl`; without `force`, only when BEAT_S passed since
        the last one (the short calls of a window). Lost: the lease is not ours any more."""
        now = time.monotonic()
        if not force and now - self.beaten < BEAT_S:
            return
        res = self._ask(protocol.LEASE_BEAT, ttl)
        if not res.get("granted"):
            holder = res.get("holder")
            named = (
                leasing.describe(holder, float(res.get("age") or 0))
                if holder is not None and not leasing.lease_error(holder)
                else "nobody"
            )
            raise Lost(f"this rollout's lease on the host is held by {named} now")
        self.beaten, self.promised = now, ttl

    def park(self) -> None:
        """The walk stopped before its end (Ctrl-C, a refused resume): the lease stays,
        naming this run, but stale at once, so `--resume` takes it over without waiting.
        Best effort: a host that cannot be asked keeps the lease until its promise runs out."""
        from patcher.errors import VpatchError
        from patcher.output.lines import note

        try:
            self._ask(protocol.LEASE_PARK, 0.0)
        except VpatchError as exc:  # the session may be gone; the promised beat covers it
            why = exc.message.splitlines()[0] if exc.message else ""
            note(f"{self.transport.target}: lease not parked: {why}")

    def give_up(self) -> dict[str, Any]:
        """`vpatch rollout release`: ask the host to give this run's lease up, which it does
        only once the lease's controller is gone (leasing.RELEASED, journaled there); the
        answer as the host sent it (`released_words` says it)."""
        return self._ask(protocol.LEASE_RELEASE, 0.0)

    def release(self) -> dict[str, str]:
        """What the walk's last step carries to give the lease up (protocol.step_request)."""
        return {"run": self.run, "who": self.who}
