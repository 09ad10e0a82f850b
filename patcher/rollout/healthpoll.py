"""`vpatch rollout`'s health wait, paced: when the controller asks the agent for the next
round of health tries. Pure (tests/unit/test_healthpoll.py drives it on a fake clock).

Why: the agent polls a URL `interval` apart for as long as one call's `wait`, and stops early
when its next try would fall past that wait. The controller used to call again at once,
asking for what was left of its own deadline: in the last second before --health-timeout
each call made one try and returned, and the controller called again, a tight loop (791
requests to the server in a 5 s timeout). So a call never starts sooner than `interval` after
the previous one returned (its last try began before it returned): consecutive tries are
always at least `interval` apart, across calls too, and a timeout of T seconds makes at most
T / interval + 1 tries.
"""

from __future__ import annotations

INTERVAL = 1.0  # seconds between two health tries, within one agent call and across calls


def next_call(
    now: float, deadline: float, returned: float | None, interval: float, most: float
) -> tuple[float, float] | None:
    """(seconds to sleep first, the call's `wait`) for the next health call, or None when
    no try fits before `deadline` any more (the wait has failed). `returned`: when the last
    call came back (None: none was made yet: the first call is always made, even past the
    deadline, so a host is tried at least once); `most`: the longest one call may wait."""
    start = now if returned is None else max(now, returned + interval)
    if returned is not None and start > deadline:
        return None
    return start - now, max(0.0, min(most, deadline - start))
