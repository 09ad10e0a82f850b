"""`vpatch apply | verify | rollback | status | ensure`: one command across the targets.

Every host runs the same engine command (patcher.run.engine; ensure: patcher.run.ensure.ensure)
under
the fleet policy (patcher.run.fleet); the results become one RunResult, rendered for a person or as
one JSON document. Exit: 0 every host in the desired state; 1 a host failed; 2 bad input, or a
target that holds something vpatch cannot patch (errors.Unsupported).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from patcher.commands import _targets
from patcher.commands._help import SPEC_HELP
from patcher.errors import HostError, UsageError
from patcher.exitcodes import ExitCode

if TYPE_CHECKING:
    from patcher.inventory.targets import Target
    from patcher.result import HostResult
    from patcher.run import engine
    from patcher.specs.model import PatchSpec
    from patcher.transports import Transport

_FORCE_HELP = "patch files not pristine per RECORD"


def add_options(p: argparse.ArgumentParser, name: str) -> None:
    """The options of `vpatch NAME` (apply, verify, rollback, status or ensure)."""
    many = "*" if name in ("rollback", "status") else "+"
    p.add_argument("specs", nargs=many, metavar="SPEC", help=SPEC_HELP)
    _targets.target_options(p)
    if name == "apply":
        _targets.level_option(p)
        p.add_argument(
            "--dry-run", action="store_true", help="show what would change, write nothing"
        )
        p.add_argument("--diff", action="store_true", help="print unified diffs")
        p.add_argument("--force", action="store_true", help=_FORCE_HELP)
        p.add_argument(
            "--adopt",
            action="store_true",
            help="record a hand-edited file that already has the spec's code as applied by it "
            "(pip's bytes, from the wheel, become its backup), so rollback and status work",
        )
        _targets.wheelhouse_option(p)
    elif name == "verify":
        _targets.level_option(p)
        _metrics_options(p)
    elif name == "rollback":
        p.add_argument(
            "--dry-run", action="store_true", help="show what would be restored, write nothing"
        )
        p.add_argument("--diff", action="store_true", help="print the unified diffs it restores")
        p.add_argument("--force", action="store_true", help="restore even if the file drifted")
        _targets.level_option(
            p,
            "checks of the specs that stay, re-run after a partial rollback (undone if one "
            "fails; default: full)",
        )
    elif name == "ensure":
        _targets.ensure_level(p)
        p.add_argument("--force", action="store_true", help=_FORCE_HELP)


def _metrics_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics",
        metavar="URL",
        help="also scrape this Prometheus endpoint ON each host (vLLM's /metrics) and check "
        "speculative decoding acceptance (probe `metrics`)",
    )
    p.add_argument(
        "--min-acceptance",
        metavar="RATE",
        help="fail the metrics probe below this draft acceptance rate (0.4 or 40%%); "
        "overrides the spec's [metrics] min_acceptance_rate",
    )
    p.add_argument(
        "--metrics-window",
        metavar="SECONDS",
        help="scrape twice, SECONDS apart, and judge only the traffic in between "
        "(default: one scrape, the server's lifetime)",
    )


def _one_host(
    target: Target,
    args: argparse.Namespace,
    specs: list[PatchSpec],
    opts: engine.Options,
    ids: Sequence[str] = (),
    early: Transport | HostError | None = None,
    ctx: engine.RunContext | None = None,
    pristine: engine.Pristine | None = None,
) -> HostResult:
    """Connect (or take the transport _start_early opened), run the command, close; any
    per-host failure becomes that host's error."""
    from patcher.run import engine

    try:
        if isinstance(early, HostError):
            raise early
        transport = early if early is not None else _targets._open(target, args)
    except HostError as exc:
        return engine.connect_error(target.name, exc)
    try:
        return _dispatch(args.command, specs, transport, opts, args.state_dir, ids, ctx, pristine)
    finally:
        transport.close()


def run(args: argparse.Namespace) -> int:
    from patcher.output import progress

    # One host on a terminal: a live line from the start (the specs load, the host connects,
    # its probes run), erased before the result prints. A fleet has its bar (progress_for).
    one = not args.ray and len(args.host) <= 1 and not args.inventory
    with progress.live(f"{args.command}: starting") if one else nullcontext():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from patcher.output import progress
    from patcher.run import fleet

    # --ray asks a cluster for its nodes: only once the specs are known good. Otherwise the
    # targets come first, and the first hosts' sessions start while the specs load.
    early: dict[int, Transport | HostError] = {}
    if args.report:  # a link or a stranger's file at the name: refused before any host
        from patcher import safewrite

        safewrite.check(args.report)
    if not args.ray:
        targets = _targets.targets(args)
        policy = _targets.policy(args, len(targets))
        early = _targets._start_early(targets, args, policy)
    try:
        specs, ids, opts = _prepare(args)
        if args.ray:
            targets = _targets.targets(args)
            policy = _targets.policy(args, len(targets))
    except BaseException:
        _targets._close_early(early)  # a session started early and never asked is killed
        raise
    from patcher.output.report import (
        progress_for,
        render_human,
        render_json,
        render_problems,
        write_report,
    )
    from patcher.result import RunResult
    from patcher.run import engine

    ctx = engine.RunContext()  # what this run's hosts share: texts, rewrites, counts
    ctx.hosts.defer = True  # the hosts' answers are written once, at the end (factcache)
    pristine = WheelTexts(getattr(args, "wheelhouse", []), getattr(args, "refresh", False))
    try:
        with progress_for(len(targets), args.json or progress.quiet()) as bar:
            hosts = fleet.run(
                [t.name for t in targets],
                lambda i: _one_host(
                    targets[i], args, specs, opts, ids, early.pop(i, None), ctx, pristine
                ),
                policy,
                [(s.id, s.package) for s in specs] + [(i, "?") for i in ids],
                bar,
            )
    finally:
        _targets._close_early(early)  # started early, never run (Ctrl-C, max-fail)
        progress.stop_live()  # the result and errors print on a clean terminal
        ctx.flush()
    if args.command == "rollback" and ids:
        _unknown_ids(hosts, ids)
    stats = ctx.stats()
    result = RunResult(args.command, all(h.ok for h in hosts), hosts, stats)
    if args.report:
        write_report(result, args.report)
    if args.json:
        render_json(result)
    elif args.command == "ensure":
        from patcher.commands import _ensureview

        _ensureview.render_ensure(result)
    else:
        render_human(result, show_diff=getattr(args, "diff", False))
    if not result.ok and (args.json or args.command != "ensure"):  # ensure prints its own
        render_problems(result)
    if ctx.unsupported:  # errors.Unsupported: no run can succeed there as it is
        return ExitCode.UNSUPPORTED
    return ExitCode.OK if result.ok else ExitCode.FAILED


def _unknown_ids(hosts: list[HostResult], ids: Sequence[str]) -> None:
    """`rollback ID` where no target that answered has ID applied: most likely a typo (a
    spec FILE with nothing to roll back is fine: that is what a second rollback meets). Such
    an id fails on every target, so the run exits 1 with a hint."""
    from patcher.result import host_ok

    for sid in ids:
        found = [p for h in hosts if h.error is None for p in h.patches if p.id == sid]
        if not found or any(p.outcome != "not_applied" for p in found):
            continue
        for p in found:
            p.outcome = "failed"
            p.message = f"{sid} is applied on none of the targets: nothing to roll back"
    for h in hosts:
        h.ok = host_ok("rollback", h)


def _prepare(
    args: argparse.Namespace,
) -> tuple[list[PatchSpec], list[str], engine.Options]:
    """The specs (or, for rollback/verify, spec ids) and the engine's options; every usage
    error here comes before any host is asked anything."""
    from patcher.caches import rewrites as rewrite_cache
    from patcher.run import engine
    from patcher.specs import catalog

    ids: list[str] = []
    if args.command in ("rollback", "verify"):
        specs, ids = catalog.load_or_ids(args.specs)
    else:
        specs = catalog.load_all(args.specs) if args.specs else []
    if args.command in ("apply", "verify", "ensure") and not rewrite_cache.covers(specs):
        _prefetch_rewriters()
    opts = engine.Options(
        dry_run=getattr(args, "dry_run", False),
        force=getattr(args, "force", False),
        level=getattr(args, "level", "full"),
        adopt=getattr(args, "adopt", False),
        **_metrics_values(args),
    )
    if args.command == "ensure":
        from patcher.run import ensure as hooks

        opts = hooks.ensure_options(args.level, args.force)
    return specs, ids, opts


def _metrics_values(args: argparse.Namespace) -> dict[str, Any]:
    """verify's --metrics/--min-acceptance, checked before any host is contacted (exit 2)."""
    url, rate = getattr(args, "metrics", None), getattr(args, "min_acceptance", None)
    window = getattr(args, "metrics_window", None)
    if rate is not None and url is None:
        raise UsageError("--min-acceptance needs --metrics URL", "add --metrics URL")
    if window is not None and url is None:
        raise UsageError("--metrics-window needs --metrics URL", "add --metrics URL")
    if url is None:
        return {"metrics_url": None, "min_acceptance": None, "metrics_window": None}
    from patcher.serving import metrics

    return {
        "metrics_url": metrics.check_url(url),
        "min_acceptance": metrics.parse_rate(rate) if rate is not None else None,
        "metrics_window": metrics.parse_window(window) if window is not None else None,
    }


def _dispatch(
    command: str,
    specs: list[PatchSpec],
    transport: Transport,
    opts: engine.Options,
    state_dir: str | None,
    ids: Sequence[str] = (),
    ctx: engine.RunContext | None = None,
    pristine: engine.Pristine | None = None,
) -> HostResult:
    """The host's result of `command` (ensure: patcher.run.ensure; the rest: engine.run);
    `pristine` is pip's text of a file (default: a wheel store of this host's own)."""
    from patcher.run import engine

    ctx = ctx if ctx is not None else engine.RunContext()
    if command == "ensure":
        from patcher.run import ensure as hooks

        return hooks.ensure(specs, transport, opts, state_dir, ctx=ctx)
    wanted = specs or None if command == "rollback" else specs  # rollback: no spec = all
    return engine.run(
        command,
        wanted,
        transport,
        opts,
        ctx,
        state_dir=state_dir,
        ids=ids,
        pristine=pristine or WheelTexts(()),
    )


class WheelTexts:
    """pip's text of a file (engine.Pristine), from the run's wheel store: what apply --adopt
    records as the base, and what verify names a hand edit's lines against. The store (and
    its imports) is made on first use: most runs need none. One per run, shared by its hosts."""

    def __init__(self, wheelhouses: Sequence[Any], refresh: bool = False) -> None:
        import threading

        self.wheelhouses = list(wheelhouses)
        self.refresh = refresh
        self._store: Any = None
        self._lock = threading.Lock()

    def __call__(self, package: str, version: str, rel: str) -> str | None:
        with self._lock:
            if self._store is None:
                from patcher.wheels.store import Store

                self._store = Store.for_run(self.wheelhouses, refresh=self.refresh)
            store = self._store
        text: str | None = store.text(package, version, rel)
        return text


def _prefetch_rewriters() -> None:
    """libcst costs ~0.3 s to import: do it while the hosts connect and inspect (I/O waits),
    not after, on the critical path. The import lock makes the engine's own import wait.
    Skipped when earlier runs left rewrites of every spec on disk (patcher.caches.rewrites):
    then the run most likely needs no libcst at all, and a miss imports it on demand."""
    import threading

    def load() -> None:
        from patcher.rewrite import elements, statements, values  # noqa: F401

    threading.Thread(target=load, name="vpatch-prefetch", daemon=True).start()
