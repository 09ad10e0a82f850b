"""A block of lines redrawn in place on a terminal: what a rollout's live view draws
(patcher.rollout.watching). rich's Live does the cursor moves (it is vpatch's terminal
library already: the live line of patcher.output.progress); it redraws on its own thread a
few times a second, so a clock in the lines moves while nothing else happens, and whatever
else is written to stderr meanwhile (a batch's line, a warning) goes above the block instead
of through it.

The lines come from a function of the terminal's width (the caller's pure renderer); they
are shown as text, never as rich markup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

REFRESH = 4  # redraws a second


class Screen:
    """`lines(width)` drawn on `file` (a terminal) from `start` to `stop`; `transient`: erased
    at the stop (the command's result follows), else the last drawing stays."""

    def __init__(
        self, lines: Callable[[int], list[str]], file: IO[str], transient: bool = True
    ) -> None:
        from rich.live import Live

        from patcher.output import colour

        self.lines = lines
        self.console = colour.console(file)
        self.live = Live(
            get_renderable=self._renderable,
            console=self.console,
            refresh_per_second=REFRESH,
            transient=transient,
            redirect_stdout=False,  # stdout is the result's (or --events -'s)
            redirect_stderr=True,
            vertical_overflow="ellipsis",  # taller than the terminal: the top hosts
        )

    def _renderable(self) -> Any:
        from rich.text import Text

        width = max(20, self.console.width)
        return Text("\n".join(self.lines(width)), no_wrap=True, overflow="ellipsis")

    def start(self) -> None:
        self.live.start()

    def refresh(self) -> None:
        """Draw now (an event came): the next tick would, a quarter second later."""
        self.live.refresh()

    def stop(self) -> None:
        self.live.stop()
