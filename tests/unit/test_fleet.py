"""Scheduling policy on its own: canary, batches, max-fail, order, skipped rows, Ctrl-C."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from patcher.errors import UsageError
from patcher.result import HostResult
from patcher.run import fleet

IDS = [("spec-a", "pkg")]


def make_work(bad: set[int], log: list[int], delay: float = 0.0) -> fleet.Work:
    lock = threading.Lock()

    def work(i: int) -> HostResult:
        with lock:
            log.append(i)
        time.sleep(delay)
        return HostResult(target=f"h{i}", ok=i not in bad)

    return work


def names(n: int) -> list[str]:
    return [f"h{i}" for i in range(n)]


def test_all_hosts_run_and_keep_order() -> None:
    log: list[int] = []
    res = fleet.run(names(10), make_work(set(), log, 0.01), fleet.Policy(parallel=4), IDS)
    assert [r.target for r in res] == names(10) and all(r.ok for r in res)
    assert sorted(log) == list(range(10))


def test_bad_canary_skips_everyone_else() -> None:
    log: list[int] = []
    res = fleet.run(names(6), make_work({1}, log), fleet.Policy(parallel=4, canary=2), IDS)
    assert sorted(log) == [0, 1]
    assert [r.patches[0].outcome for r in res[2:]] == ["skipped"] * 4
    assert "canary" in res[2].patches[0].message


def test_max_fail_stops_scheduling() -> None:
    log: list[int] = []
    res = fleet.run(names(6), make_work({1, 2, 3}, log), fleet.Policy(parallel=1, max_fail=2), IDS)
    assert log == [0, 1, 2]
    assert [r.ok for r in res[:3]] == [True, False, False]
    assert all(r.patches[0].outcome == "skipped" for r in res[3:])
    assert "max-fail" in res[3].patches[0].message


def test_max_fail_counts_every_failed_host_of_the_batch_and_names_the_limit() -> None:
    """`--batch 3 --max-fail 1`, the whole first batch failing: the three were in flight
    when the first failure reached the limit, so three failed, and the limit is 1."""
    log: list[int] = []
    policy = fleet.Policy(parallel=3, batch=3, max_fail=1)
    res = fleet.run(names(6), make_work({0, 1, 2}, log), policy, IDS)
    assert sorted(log) == [0, 1, 2] and not any(r.ok for r in res)
    why = {r.patches[0].message for r in res[3:]}
    assert why == {"max-fail reached (3 failed; the limit is 1)"}


def test_batches_run_in_order() -> None:
    log: list[int] = []
    active = [0]
    peak = [0]
    lock = threading.Lock()

    def work(i: int) -> HostResult:
        with lock:
            log.append(i)
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        return HostResult(target=f"h{i}", ok=True)

    fleet.run(names(6), work, fleet.Policy(parallel=8, batch=2), IDS)
    assert peak[0] <= 2
    assert sorted(log[:2]) == [0, 1] and sorted(log[2:4]) == [2, 3]


def test_interrupt_finishes_in_flight_and_skips_rest() -> None:
    """A real SIGINT (Ctrl-C) while hosts run: in-flight hosts finish, no new host starts."""
    log: list[int] = []

    def work(i: int) -> HostResult:
        log.append(i)
        if i == 1:
            os.kill(os.getpid(), signal.SIGINT)  # delivered to the main thread, as Ctrl-C is
            time.sleep(1.0)
        else:
            time.sleep(2.0)  # still in flight when the Ctrl-C is handled
        return HostResult(target=f"h{i}", ok=True)

    res = fleet.run(names(5), work, fleet.Policy(parallel=2), IDS)
    assert res[0].ok and res[1].ok  # in flight when Ctrl-C came: finished, not abandoned
    assert all(r.patches[0].outcome == "skipped" for r in res[2:])
    assert "interrupted" in res[4].patches[0].message
    assert sorted(log) == [0, 1]


@pytest.mark.parametrize(
    ("value", "total", "want"), [("2", 10, 2), ("10%", 16, 2), ("50%", 5, 3), (None, 5, 0)]
)
def test_parse_count(value: str | None, total: int, want: int) -> None:
    assert fleet.parse_count("--batch", value, total) == want


@pytest.mark.parametrize("value", ["0", "-1", "abc", "0%", "150%"])
def test_parse_count_rejects(value: str) -> None:
    with pytest.raises(UsageError):
        fleet.parse_count("--max-fail", value, 10)


@pytest.mark.parametrize(
    ("policy", "total", "want"),
    [
        (fleet.Policy(parallel=16), 3, [0, 1, 2]),
        (fleet.Policy(parallel=2), 5, [0, 1]),
        (fleet.Policy(parallel=16, canary=1), 5, [0]),
        (fleet.Policy(parallel=16, canary=9), 5, [0, 1, 2, 3, 4]),
        (fleet.Policy(parallel=16, batch=2), 5, [0, 1]),
        (fleet.Policy(parallel=1, canary=3), 5, [0]),
        (fleet.Policy(parallel=4), 0, []),
    ],
)
def test_first_wave_is_what_run_starts_first(
    policy: fleet.Policy, total: int, want: list[int]
) -> None:
    """The hosts whose sessions cli starts while the specs load: exactly the ones `run` starts
    before any host has finished."""
    assert fleet.first_wave(policy, total) == want
    started: list[int] = []
    gate = threading.Event()

    def work(i: int) -> HostResult:
        started.append(i)
        gate.wait(5)
        return HostResult(target=f"h{i}", ok=True)

    runner = threading.Thread(target=fleet.run, args=(names(total), work, policy, IDS))
    runner.start()
    deadline = time.monotonic() + 5
    while len(started) < len(want) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # nobody else may start while all of the first wave still runs
    assert sorted(started) == want
    gate.set()
    runner.join(10)
