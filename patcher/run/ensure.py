"""Pre-start hooks' logic: `ensure` (apply if needed, then verify), on any target or on this
machine's python (what `exec` runs before it becomes the server). The commands, their output,
`exec` itself and the systemd drop-in are patcher.commands.hooks and patcher.commands.hosts.

A hook runs on every server start, so its common case is "everything is already in place" and
that case must cost one agent call: journal + sha256 say so (static), nothing is rewritten and
nothing is imported. Levels:

    default        static when nothing was written; `full` (import + probes) after a write,
                   and a failed check restores the previous bytes (as `apply` does)
    --level X      X after a write AND a verify at X of the specs already in place (e.g.
                   `--level full` in CI runs the probes even when nothing changed)

A probe imports its module itself, so after a write `full` costs no more than `import` when the
spec has probes (one fresh interpreter, ~8 s on vLLM), and it is the only check that can tell a
patch that imports from a patch that works.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from patcher.plan.base import Level, Options
from patcher.plan.recheck import recheck, recheck_specs
from patcher.result import GOOD, HostResult, host_ok
from patcher.run import engine
from patcher.run.exchange import RunContext
from patcher.specs.model import PatchSpec
from patcher.transports import Transport

WRITE_LEVEL: Level = "full"


@dataclass(frozen=True)
class EnsureOptions(Options):
    """`level` checks what ensure writes; `recheck` (the explicit `--level`, if any) also checks
    the specs that were already in place. It is an `Options`, so the fleet code passes it on
    untouched."""

    recheck: Level | None = None


def ensure_options(level: Level | None, force: bool = False) -> EnsureOptions:
    """The options of `ensure --level LEVEL` (None: checks only what it writes, at full)."""
    return EnsureOptions(force=force, level=level or WRITE_LEVEL, recheck=level)


def ensure(
    specs: list[PatchSpec],
    transport: Transport,
    opts: Options,
    state_dir: str | None = None,
    *,
    ctx: RunContext | None = None,
) -> HostResult:
    """The host's result: `apply` semantics (it writes only what is missing, and a write is
    verified and undone if the check fails), plus, when `--level` asks, a verify of what was
    already in place, whose outcomes the planner folds in (`plan.recheck`). Without `ctx`
    (exchange.RunContext), the call is a run of its own."""
    started = time.monotonic()
    ctx = ctx if ctx is not None else RunContext()
    host = engine.apply(specs, transport, opts, state_dir, ctx=ctx)
    level = opts.recheck if isinstance(opts, EnsureOptions) else None
    todo = recheck_specs(specs, host.patches) if host.error is None else []
    # In place but never verified (a run stopped while its checks ran): checked now at the
    # level a write is, and recorded when they pass (engine.verify), even without --level.
    unchecked = {a.subject for a in host.attention if a.state == "unverified"}
    if level is None:
        todo = [s for s in todo if s.id in unchecked]
    if todo:
        checked = engine.verify(
            todo, transport, Options(level=level or WRITE_LEVEL), state_dir, ctx=ctx
        )
        if checked.error is not None:
            host.error = checked.error
        else:
            host.patches = recheck(host.patches, checked.patches)
            fine = {p.id for p in host.patches if p.outcome in GOOD["ensure"]}
            host.attention = [a for a in host.attention if a.subject not in fine]
    host.ok = host_ok("ensure", host)
    host.seconds = round(time.monotonic() - started, 3)
    return host
