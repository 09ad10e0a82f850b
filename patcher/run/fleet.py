"""Many hosts: bounded parallelism, canary, rolling batches, max-fail, Ctrl-C, progress.

Scheduling is separate from what runs on a host (`work`), so the policy is testable on its own
and the same for every command. A host that is never started is reported `skipped`, never
silently dropped: the report always has one row per selected target, in selection order.
"""

from __future__ import annotations

import math
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, NamedTuple

from patcher.errors import UsageError
from patcher.output.progress import HostsProgress

if TYPE_CHECKING:
    import queue

    from patcher.result import HostResult

Work = Callable[[int], "HostResult"]


class Policy(NamedTuple):
    parallel: int = 16
    canary: int = 0
    batch: int = 0  # 0 = one batch with every host
    max_fail: int = 0  # 0 = never stop early


def parse_count(flag: str, value: str | None, total: int) -> int:
    """`N` or `P%` of `total` (rounded up, at least 1); None -> 0 (feature off)."""
    if value is None:
        return 0
    text = value.strip()
    try:
        if text.endswith("%"):
            pct = float(text[:-1])
            if not 0 < pct <= 100:
                raise ValueError
            return max(1, math.ceil(total * pct / 100))
        n = int(text)
        if n < 1:
            raise ValueError
        return n
    except ValueError:
        raise UsageError(
            f"{flag} {value!r} is not a count or percentage", f"e.g. {flag} 2 or {flag} 10%"
        ) from None


def skipped(target: str, spec_ids: Sequence[tuple[str, str]], why: str) -> HostResult:
    from patcher.result import HostResult, PatchResult

    host = HostResult(target=target, ok=False)
    host.patches = [PatchResult(sid, pkg, None, "skipped", why) for sid, pkg in spec_ids]
    if not host.patches:
        host.error = f"skipped: {why}"
    return host


def first_wave(policy: Policy, total: int) -> list[int]:
    """The hosts `run` starts before any other finishes: the first `parallel` of the first
    phase (the canary hosts, else the first batch). Their sessions may begin early (while the
    specs load): these are contacted whatever the others' fate."""
    first = policy.canary or policy.batch or total
    return list(range(min(policy.parallel, first, total)))


def run(
    targets: Sequence[str],
    work: Work,
    policy: Policy,
    spec_ids: Sequence[tuple[str, str]],
    progress: HostsProgress | None = None,
    interrupted: threading.Event | None = None,
) -> list[HostResult]:
    """Run `work(i)` for each target index under `policy`; results in target order.
    `interrupted` is set on the first Ctrl-C (a host's work may stop at its next safe point)."""
    import queue  # here, not at the top: cli reads the policy (first_wave) before any host

    progress = progress or HostsProgress()
    results: list[HostResult | None] = [None] * len(targets)
    stop = threading.Event()
    why = [""]
    failures = [0]
    progress.start(len(targets))

    def phase(indices: list[int]) -> bool:
        """Run a group of hosts; False when scheduling must stop."""
        pending = deque(indices)
        running: set[int] = set()
        # Each host's worker puts it here when done: the scheduler takes the hosts in the
        # order they finish, at a cost per host (concurrent.futures.wait costs one per host in
        # flight, every time one finishes).
        finished: queue.SimpleQueue[_Done] = queue.SimpleQueue()
        pool = _Pool(max(1, min(policy.parallel, len(indices))), work, finished)
        try:
            while pending or running:
                while pending and len(running) < policy.parallel and not stop.is_set():
                    i = pending.popleft()
                    pool.submit(i)
                    running.add(i)
                if not running:
                    break
                i, res, exc = _next(finished)  # a Ctrl-C's handler runs while this waits
                running.discard(i)
                if exc is not None:
                    raise exc
                assert res is not None
                results[i] = res
                progress.advance(res)
                if not res.ok:
                    failures[0] += 1
                    if policy.max_fail and failures[0] >= policy.max_fail and not stop.is_set():
                        why[0] = MAX_FAIL  # worded at the end: hosts in flight may fail too
                        stop.set()
        except BaseException:  # the second Ctrl-C: no waiting for the hosts in flight
            pool.shutdown(wait=False)
            raise
        pool.shutdown()
        return not stop.is_set()

    with _ctrl_c_stops(stop, why, interrupted):
        _phases(policy, phase, results, stop, why)
    progress.stop()
    if why[0] == MAX_FAIL:
        why[0] = max_fail_reached(failures[0], policy.max_fail)
    return [
        res if res is not None else skipped(targets[i], spec_ids, why[0] or "not started")
        for i, res in enumerate(results)
    ]


MAX_FAIL = "max-fail"  # `why` until the run ends, when the hosts in flight are counted too

# How long the scheduler's wait for a host may hold off a pending Ctrl-C (below).
WAKE_S = 0.25


def _next(finished: queue.SimpleQueue[_Done]) -> _Done:
    """The next host done, waited for in slices: a blocked wait runs a signal's handler when
    the signal interrupts it, but a second Ctrl-C that arrives while the first's handler is
    still running only trips a flag, and CPython then blocks again until a host finishes
    (minutes, for a rollout's restart). Each slice's end runs what is pending."""
    import queue

    while True:
        try:
            return finished.get(timeout=WAKE_S)
        except queue.Empty:
            continue


def max_fail_reached(failed: int, limit: int) -> str:
    """Why the hosts after a stop on --max-fail were skipped: the hosts that failed in all
    (those in flight when the limit was reached count too: a batch of 3 that all fail is 3
    failed, not 1) and the limit."""
    return f"max-fail reached ({failed} failed; the limit is {limit})"


# A host done: (index, its result, or what its work raised).
_Done = tuple[int, "HostResult | None", "BaseException | None"]


class _Pool:
    """What the scheduler needs of concurrent.futures.ThreadPoolExecutor, which imports
    logging (~3 ms of every command's start, issue 41): up to `size` worker threads, one
    started with each of the first `size` hosts submitted (the scheduler submits that many at
    once) and reused, each running `work(i)` for the next index and putting (i, result, None)
    or (i, None, what it raised) on `done`. Not daemons: as with the executor, the interpreter
    waits for the hosts in flight before it exits."""

    def __init__(self, size: int, work: Work, done: queue.SimpleQueue[_Done]) -> None:
        import queue

        self._size, self._work, self._done = size, work, done
        self._todo: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, i: int) -> None:
        self._todo.put(i)
        if len(self._threads) < self._size:
            worker = threading.Thread(target=self._loop, name=f"vpatch-host-{len(self._threads)}")
            worker.start()
            self._threads.append(worker)

    def _loop(self) -> None:
        while (i := self._todo.get()) is not None:
            try:
                self._done.put((i, self._work(i), None))
            except BaseException as exc:  # the scheduler raises it, as Future.result() did
                self._done.put((i, None, exc))

    def shutdown(self, wait: bool = True) -> None:
        """Hosts not yet started are dropped; each worker ends after its host in flight."""
        import queue

        try:
            while True:
                self._todo.get_nowait()
        except queue.Empty:
            pass
        for _ in self._threads:
            self._todo.put(None)
        if wait:
            for worker in self._threads:
                worker.join()


@contextmanager
def _ctrl_c_stops(
    stop: threading.Event, why: list[str], interrupted: threading.Event | None = None
) -> Iterator[None]:
    """First Ctrl-C: stop scheduling, let in-flight hosts finish their atomic step, report.
    Second Ctrl-C: the default (KeyboardInterrupt). A handler that only sets an event cannot
    interrupt the scheduler between submitting a host and recording it, as an exception could."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: object) -> None:
        # The default handler first: a second Ctrl-C that comes while this one is still being
        # handled (a host woken by `interrupted` can be that quick) must raise, not run this
        # handler again and be swallowed.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        why[0] = "interrupted (Ctrl-C): in-flight hosts finished, no new host started"
        stop.set()
        if interrupted is not None:
            interrupted.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _phases(
    policy: Policy,
    phase: Callable[[list[int]], bool],
    results: list[HostResult | None],
    stop: threading.Event,
    why: list[str],
) -> None:
    """Canary hosts first (all must pass), then the rest in batches."""
    order = list(range(len(results)))
    canary, rest = order[: policy.canary], order[policy.canary :]
    if canary and phase(canary) and any(not results[i].ok for i in canary):  # type: ignore[union-attr]
        why[0] = "a canary host failed"
        stop.set()
    size = policy.batch or max(1, len(rest))
    for start in range(0, len(rest), size):
        if stop.is_set() or not phase(rest[start : start + size]):
            break
