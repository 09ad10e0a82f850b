"""The fleet's answer memory: one budget for the agent answers every host is sending at once.

Why: `transport.MAX_ANSWER_BYTES` bounds one answer line (64 MiB), but a line of that size
costs about four times as much once decoded (the bytes, the text, the JSON), and a fleet
reads up to --parallel answers at once: hostile or broken hosts each sending a line just
under the cap would make the controller hold gigabytes. Every byte a transport buffers for
an answer is charged here when it arrives and given back when that call ends (decoded or
failed), so the controller holds at most FLEET_ANSWER_BYTES of answers in flight, plus a
small allowance for hosts whose answers are small (they are never the ones refused).

Charged per thread: a call runs on one thread from its first byte to its decoded answer. One
budget per run: the command makes it and hands it to every transport it opens (through
`transports.Settings.budget`); a transport made without one has its own.
"""

from __future__ import annotations

import threading

from patcher.errors import AgentError

FLEET_ANSWER_BYTES = 512 << 20
# A call holding less than this never fails on the fleet's budget (an honest host's answer,
# while one big answer holds the rest); all of them together at most double the budget.
SMALL = FLEET_ANSWER_BYTES // 16


class Budget:
    """What the answers of one run's calls hold in flight, against its limit."""

    def __init__(self, limit: int = FLEET_ANSWER_BYTES, small: int = SMALL) -> None:
        self.limit, self.small = limit, small
        self.total = self.peak = 0
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()

    def charge(self, target: str, n: int) -> None:
        """`n` more bytes of this thread's answer from `target`; AgentError when the fleet's
        answers would go over the budget and this one is not small."""
        me = threading.get_ident()
        with self._lock:
            mine = self._held.get(me, 0) + n
            over = self.total + n > self.limit
            if (over and mine > self.small) or self.total + n > 2 * self.limit:
                raise AgentError(
                    f"{target}: agent answer refused: the fleet's answers in flight would take"
                    f" more than {self.limit >> 20} MiB of controller memory",
                    "fewer hosts at once (--parallel), or fewer or smaller files per run",
                    "protocol",
                )
            self._held[me] = mine
            self.total += n
            self.peak = max(self.peak, self.total)

    def settle(self) -> None:
        """This thread's call is over: what its answer held is free again."""
        with self._lock:
            self.total -= self._held.pop(threading.get_ident(), 0)
