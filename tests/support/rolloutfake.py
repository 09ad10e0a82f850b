"""A fake host for `vpatch rollout`'s executor (patcher/rollout/walk.py) in milliseconds: the
agent's answers to the rollout's requests (fetch, restart, health, rollout_step, inspect) from
a server whose counters grow at a set acceptance rate, a journal of the step entries the
executor records, and apply/rollback as counted stand-ins for patcher.run.engine.

What the lab (tests/support/rolloutlab.py) proves on real parts, this lets a unit test drive
through every phase: a Ctrl-C or a lost controller (`Lost`, raised from inside a step, as a
SIGKILL ends the walk without any handler) in each of them.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from patcher.agent import handle, protocol
from patcher.result import PatchResult
from patcher.rollout import walk
from patcher.rollout.settings import Settings
from patcher.serving.model import VLLM

if TYPE_CHECKING:
    from patcher.inventory.targets import Target
    from patcher.run.exchange import RunContext
    from patcher.specs.model import PatchSpec

DRAFTS_PER_SCRAPE = 100
TOKENS_PER_DRAFT = 3


class Lost(BaseException):
    """The controller is gone mid-step (SIGKILL): nothing of it runs on, nothing is recorded."""


@dataclass
class FakeHost:
    """One host: its server, its journal, and what each step asked of it."""

    target: str = "h1"  # the Transport protocol's (patcher/transports/base.py), with close, call
    acceptance: float = 0.7
    journal: list[dict[str, Any]] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)  # the step each request was made in
    current: Callable[[], str | None] = lambda: None  # the executor's step now (h.current)
    hook: Callable[[str], None] = lambda step: None  # called with the step of each request
    hand_edited: bool = False  # a target file is not as pip or vpatch left it: apply refuses
    # a real state dir: the rollout lease's requests (and the step entries, for the lease's
    # release) go to the real agent there (patcher/agent/lease.py); None: no lease requests
    state_dir: str | None = None
    ops: list[str] = field(default_factory=list)  # every request's op, in order ("plan" too)
    tokens_per_s: float | None = (
        None  # generation grows with wall time at this rate (else per scrape)
    )
    # the host as the agent would stamp it on a step entry and answer an inspect's `seen_for`
    # (patcher/agent/seen.py): a test changes it between two controllers (a hand rollback)
    seen: dict[str, Any] = field(default_factory=lambda: {"files": {}, "server": [[1, "T0"]]})
    # Where each scrape's read time goes (canary's clock in tests/unit/test_canary.py), and
    # how far (in seconds of generation) a scrape's count is moved either way, the same at
    # every run: the per-interval noise a real server has, never the machine's load.
    stamps: Stamps | None = None
    wiggle: float = 0.0
    _scrapes: int = 0
    _born: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        pass

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        op = request["op"]
        self.ops.append(op)
        if op == protocol.LEASE:
            assert self.state_dir is not None, "a lease request to a host without a state dir"
            return handle(dict(request, state_dir=self.state_dir))
        if op == protocol.STEP:
            entry = dict(request["entry"], ts="2026-12-01T12:00:00.000Z", seen=dict(self.seen))
            self.journal.append(entry)
            if self.state_dir is not None:
                return handle(dict(request, state_dir=self.state_dir))
            return {"ok": True}
        if op == "inspect":
            runs = [e["run"] for e in self.journal]
            newest = runs[-1] if runs else None
            answer = {"ok": True, "rollout": [e for e in self.journal if e["run"] == newest]}
            if "seen_for" in request:
                answer["seen"] = dict(self.seen)
            return answer
        step = self.current()
        assert step is not None, f"a {op} request outside any step"
        self.ran.append(step)
        self.hook(step)
        if op == "fetch":
            return {"ok": True, "text": self._metrics(), "seconds": 0.001}
        if op == protocol.RESTART:
            self._scrapes = 0  # a new server: its counters start again
            self._born = time.monotonic()
            return {"ok": True, "exit": 0, "timed_out": False, "seconds": 0.01}
        if op == protocol.HEALTH:
            return {"ok": True, "healthy": True, "status": 200, "tries": 1}
        raise AssertionError(f"unexpected request {op}")

    def _metrics(self) -> str:
        self._scrapes += 1
        drafts = self._scrapes * DRAFTS_PER_SCRAPE
        tokens = drafts * TOKENS_PER_DRAFT
        lines = [
            f"{VLLM.drafts} {drafts}",
            f"{VLLM.draft_tokens} {tokens}",
            f"{VLLM.accepted} {round(tokens * self.acceptance)}",
            f"{VLLM.generation} {self._generation(drafts)}",
            f'{VLLM.finished}{{finished_reason="stop"}} {self._scrapes * 10}',
        ]
        return "\n".join(f"# TYPE {ln.split()[0].split('{')[0][:-6]} counter\n{ln}" for ln in lines)

    def _generation(self, drafts: int) -> float:
        if self.tokens_per_s is None:
            return drafts * 4
        now = time.monotonic()
        if self.stamps is not None:
            self.stamps.last = now
        moved = random.Random(f"{self.target} {self._scrapes}").uniform(-1, 1) * self.wiggle
        return self.tokens_per_s * (now - self._born + moved)

    def engine_step(self, h: walk.Host, which: str) -> str:
        """patcher.run.engine's apply, rollback or plan (apply's dry run), as
        rolloutrun._engine_step runs it: counted. A hand-edited host's apply and plan refuse
        (`modified`), as the planner does."""
        step = self.current()
        assert step is not None
        self.ran.append(step)
        self.ops.append(which)
        self.hook(step)
        refused = self.hand_edited and which in ("apply", "plan")
        outcome = {"apply": "applied", "plan": "would_apply", "rollback": "rolled_back"}[which]
        message = "a hand edit: vllm/config/speculative.py differs from pip's" if refused else ""
        h.result.patches = [
            PatchResult(s.id, s.package, None, "modified" if refused else outcome, message)
            for s in h.specs
        ]
        if refused:
            raise walk._StepFailed(f"{h.specs[0].id} modified: {message}")
        return ", ".join(f"{p.id} {p.outcome}" for p in h.result.patches)


@dataclass
class Stamps:
    """The read time of the newest fake scrape, as a clock: patched in as the controller's
    clock of its scrapes (patcher.rollout.canary), a scrape is stamped with the time its
    counters were read, not that plus however long a loaded machine took to hand the answer
    back (which, over 10 ms intervals, moved a rate by half and more)."""

    last: float = 0.0

    def monotonic(self) -> float:
        return self.last


@dataclass
class ControlHost(FakeHost):
    """A control host: answers `fetch` and records every request it gets (a control host
    must never be asked for anything else: no apply, restart, health, lease or journal)."""

    asked: list[str] = field(default_factory=list)

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        self.asked.append(request["op"])
        if request["op"] != "fetch":
            return {"ok": False, "error": f"a control host was asked {request['op']}"}
        return {"ok": True, "text": self._metrics(), "seconds": 0.001}


def engine_step(h: walk.Host, which: str) -> str:
    """In place of rolloutrun._engine_step (monkeypatched): the host's FakeHost does it."""
    fake = h.transport
    assert isinstance(fake, FakeHost)
    return fake.engine_step(h, which)


def settings(**over: Any) -> Settings:
    """A rollout's options with a restart, health and metrics (every step) and short windows:
    the fake server's window closes on its second scrape (--min-drafts)."""
    base: dict[str, Any] = {
        "restart": "systemctl restart vllm",
        "restart_timeout": 60.0,
        "health": "http://localhost:8000/health",
        "health_timeout": 5.0,
        "metrics": "http://localhost:8000/metrics",
        "window": 0.01,
        "min_drafts": DRAFTS_PER_SCRAPE,
        "min_acceptance": None,
        "min_ratio": None,
        "allow_no_traffic": False,
    }
    return Settings(**{**base, **over})


def host(
    fake: FakeHost,
    target: Target,
    specs: list[PatchSpec],
    cfg: Settings,
    run: str,
    ctx: RunContext | None = None,
) -> walk.Host:
    """The executor's state for one host on `fake`, and `fake` told which step is running;
    `ctx`: the rollout's run, whose stats count its exchanges (None: uncounted)."""
    from patcher.plan.base import Options

    h = walk._host(target, fake, specs, Options(level="static"), None, cfg, run, ctx)
    fake.current = lambda: h.current
    return h


def stop_in(step: str, event: threading.Event) -> Callable[[str], None]:
    """A hook: the first request made in `step` sets `event` (the first Ctrl-C)."""

    def hook(now: str) -> None:
        if now == step:
            event.set()

    return hook


def lose_in(step: str) -> Callable[[str], None]:
    """A hook: the first request made in `step` ends the controller (Lost)."""

    def hook(now: str) -> None:
        if now == step:
            raise Lost(step)

    return hook
