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

from patcher import engine
from patcher.engine import Level, Options
from patcher.errors import HostError
from patcher.result import GOOD, HostResult, host_ok
from patcher.spec import PatchSpec
from patcher.transport import LocalTransport, Transport

WRITE_LEVEL: Level = "full"
# Outcomes that say "in place without a write": the only ones `--level` re-checks.
_IN_PLACE = ("already_applied", "satisfied_upstream")


@dataclass(frozen=True)
class EnsureOptions(Options):
    """`level` checks what ensure writes; `recheck` (the explicit `--level`, if any) also checks
    the specs that were already in place. It is an `Options`, so the fleet code passes it on
    untouched."""

    recheck: Level | None = None


def ensure_options(level: Level | None, force: bool = False) -> EnsureOptions:
    return EnsureOptions(force=force, level=level or WRITE_LEVEL, recheck=level)


def ensure(
    specs: list[PatchSpec], transport: Transport, opts: Options, state_dir: str | None = None
) -> HostResult:
    """`apply` semantics (it writes only what is missing, and a write is verified and undone if
    the check fails), plus a re-check of what was already in place when `--level` asks."""
    started = time.monotonic()
    host = engine.apply(specs, transport, opts, state_dir)
    recheck = opts.recheck if isinstance(opts, EnsureOptions) else None
    if recheck is not None and host.error is None:
        _recheck(host, specs, transport, recheck, state_dir)
    host.ok = host_ok("ensure", host)
    host.seconds = round(time.monotonic() - started, 3)
    return host


def _recheck(
    host: HostResult,
    specs: list[PatchSpec],
    transport: Transport,
    level: Level,
    state_dir: str | None,
) -> None:
    """Verify specs that were in place without a write; a failed check replaces the outcome."""
    by_id = {p.id: p for p in host.patches}
    todo = [s for s in specs if s.id in by_id and by_id[s.id].outcome in _IN_PLACE]
    if not todo:
        return
    checked = engine.verify(todo, transport, Options(level=level), state_dir)
    if checked.error is not None:
        host.error = checked.error
        return
    for v in checked.patches:
        mine = by_id[v.id]
        mine.probes = v.probes
        if v.outcome not in GOOD["verify"] or not all(p.ok for p in v.probes):
            mine.outcome, mine.message = v.outcome, v.message


def ensure_local(
    specs: list[PatchSpec], python: str, opts: Options, state_dir: str | None = None
) -> HostResult:
    """`ensure` on this machine's `python` (what `exec` runs before it becomes the command)."""
    try:
        transport = LocalTransport(python)
    except HostError as exc:
        return engine.connect_error("local", exc)
    try:
        return ensure(specs, transport, opts, state_dir)
    finally:
        transport.close()
