"""The rollout's health wait on a fake clock: the real agent's `health` op (patcher/agent/
restart.py) and the controller's loop (patcher.rollout.walk._step_health, paced by
patcher.rollout.healthpoll), the clock moving only when either sleeps or a request is made. Facts
only: how many requests reached the URL, and the count the step reports."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from patcher.agent import handle, restart
from patcher.inventory.targets import Target
from patcher.plan.base import Options
from patcher.rollout import healthpoll, walk
from tests.support import rolloutfake

URL = "http://localhost:8000/health"
REQUEST_S = 0.005  # a refused connection is quick: what let the old loop spin


class Clock:
    """monotonic() and sleep() for both sides, and the fetches the agent made."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.fetches: list[float] = []
        self.healthy_at = math.inf

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds

    def fetch(self, url: str, timeout: float, max_bytes: int) -> dict[str, Any]:
        self.fetches.append(self.now)
        self.now += REQUEST_S
        if self.now >= self.healthy_at:
            return {"status": 200, "text": "", "seconds": REQUEST_S}
        return {"error": "connection failed: Connection refused", "seconds": REQUEST_S}


class Agent:
    """A transport whose agent is this process's (patcher.agent.handle)."""

    target = "h1"

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        return handle(request)

    def close(self) -> None:
        pass


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(walk, "time", c)
    monkeypatch.setattr(restart, "time", c)
    monkeypatch.setattr("patcher.agent.fetch.fetch", c.fetch)
    return c


def health_step(timeout: float) -> walk.Host:
    cfg = rolloutfake.settings(health=URL, health_timeout=timeout)
    opts = Options(level="static")
    return walk._host(Target("h1", "h1"), Agent(), [], opts, None, cfg, "r1")


def gaps(at: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(at)]


@pytest.mark.parametrize("timeout", [0.5, 5.0, 5.5, 61.0, 130.0])
def test_a_server_that_never_answers_is_tried_at_most_once_an_interval(
    clock: Clock, timeout: float
) -> None:
    """791 requests in a 5 s timeout was the old loop at its deadline; now no two tries are
    closer than the interval, so at most timeout / interval + 1, and the step says how many."""
    h = health_step(timeout)
    start = clock.now
    with pytest.raises(walk._StepFailed) as failed:
        walk._step_health(h)
    n = len(clock.fetches)
    assert 1 <= n <= math.floor(timeout / healthpoll.INTERVAL) + 1
    assert all(g >= healthpoll.INTERVAL for g in gaps(clock.fetches))
    assert f"({n} tries)" in str(failed.value) and "Connection refused" in str(failed.value)
    assert clock.now - start >= timeout  # the wait lasted what --health-timeout asked
    assert f"not healthy after {timeout:.1f} s" in str(failed.value)


def test_a_server_that_comes_up_reports_the_tries_it_took(clock: Clock) -> None:
    h = health_step(900.0)
    clock.healthy_at = clock.now + 75.3  # past several agent calls' waits (HEALTH_CALL)
    detail = walk._step_health(h)
    n = len(clock.fetches)
    assert f"({n} tries)" in detail and n <= math.ceil(75.3 / healthpoll.INTERVAL) + 1
    assert all(g >= healthpoll.INTERVAL for g in gaps(clock.fetches))


@pytest.mark.parametrize(
    ("now", "returned", "want"),
    [
        (0.0, None, (0.0, 5.0)),  # the first call: at once, for the whole timeout
        (3.5, 3.5, (1.0, 0.5)),  # 1.5 s left: one more call fits, an interval on
        (4.5, 4.5, None),  # the next try would fall past the deadline: the wait is over
        (6.0, None, (0.0, 0.0)),  # past the deadline before any call: still tried once
        (1.0, 0.5, (0.5, 3.5)),  # a call that came back 0.5 s ago: the rest of the interval
        (3.0, 0.5, (0.0, 2.0)),  # long enough ago: at once
    ],
)
def test_next_call(now: float, returned: float | None, want: tuple[float, float] | None) -> None:
    assert healthpoll.next_call(now, 5.0, returned, 1.0, 60.0) == want


def test_one_call_waits_at_most_its_cap() -> None:
    assert healthpoll.next_call(0.0, 900.0, None, 1.0, 60.0) == (0.0, 60.0)
