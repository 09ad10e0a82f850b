"""`vpatch rollout`'s live view and event sinks, and `vpatch rollout watch REPORT`: the same
view of a rollout that runs elsewhere, from the event stream beside its report
(patcher.rollout.watching; docs/rollout.md, "Watching a rollout")."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from patcher.errors import UsageError

if TYPE_CHECKING:
    from patcher.rollout.stream import Sink
    from patcher.rollout.watching import View

EXAMPLE = "e.g. vpatch rollout watch ~/.local/state/vpatch/rollouts/3f9c0a1b2c3d.json"


def sinks_of(events: str | None, as_json: bool) -> tuple[list[Sink], View]:
    """The rollout's own sinks of its events: `--events FILE|-`, and the view on stderr: on
    a terminal redrawn in place (not while `--events -` writes to the same terminal), else
    plain timestamped lines; nothing under --json or -q (the view is then a silent one)."""
    from patcher.output import progress
    from patcher.rollout.stream import LineFile, stdout_sink
    from patcher.rollout.watching import View

    sinks: list[Sink] = []
    if events == "-":
        sinks.append(stdout_sink)
    elif events:
        from patcher import safewrite

        safewrite.check(events, "--events")  # a planted name: exit 2 before anything
        sinks.append(LineFile(events, "--events"))
    shown = not as_json and not progress.quiet()
    live = progress.shows_live() and not (events == "-" and sys.stdout.isatty())
    view = View(sys.stderr, live=shown and live)
    if shown:
        sinks.append(view)
    return sinks, view


def watch(words: list[str]) -> int:
    """`vpatch rollout watch REPORT`: the live view of REPORT's rollout on stdout (redrawn on
    a terminal, plain lines else) until its last event; a finished run replays and exits.
    Exit 0 when the run ended ok, 1 when it did not or its controller went without ending
    the stream, 2 on bad input (nothing shown), 130 when stopped by Ctrl-C."""
    from patcher.output.lines import put
    from patcher.rollout.watching import View, follow, open_events

    if len(words) != 1:
        raise UsageError("`vpatch rollout watch` takes one REPORT", EXAMPLE)
    fd = open_events(words[0])
    view = View(sys.stdout, live=sys.stdout.isatty(), transient=False)
    view.start()
    try:
        last = follow(fd, view)
    except KeyboardInterrupt:
        view.stop()
        put("note: stopped watching; the rollout goes on", sys.stderr)
        return 130
    finally:
        view.stop()
        os.close(fd)
    if last is None:
        put(f"error: {words[0]}: its controller ended without the run's last event", sys.stderr)
        put(
            "hint: the report says where each host stopped; the same `vpatch rollout` with "
            f"--resume {words[0]} continues it",
            sys.stderr,
        )
        return 1
    return 0 if last.ok else 1
