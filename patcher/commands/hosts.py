"""`vpatch apply | verify | rollback | status | ensure`: one command across the targets.

Each is one `HostCommand` of HOST_COMMANDS, looked up once by its word: its options, how it runs
on one host (patcher.run.engine; ensure: patcher.run.ensure), how its result is reported and its
exit rule. The run across the targets is theirs in common (`_run`): every host runs the command
under the fleet policy (patcher.run.fleet); the results become one RunResult, rendered for a
person or as one JSON document. Exit: 0 every host in the desired state; 1 a host failed; 2 bad
input, or a target that holds something vpatch cannot patch (errors.Unsupported).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from patcher.commands import _targets
from patcher.commands._help import SPEC_HELP
from patcher.errors import HostError, UsageError
from patcher.exitcodes import ExitCode

if TYPE_CHECKING:
    from patcher.inventory.targets import Target
    from patcher.plan.base import Options
    from patcher.result import HostResult, RunResult
    from patcher.run.engine import Pristine
    from patcher.run.exchange import RunContext
    from patcher.specs.model import PatchSpec
    from patcher.transports import Transport

_FORCE_HELP = "patch files not pristine per RECORD"


class HostRun(NamedTuple):
    """What every host of one command run shares: the specs, the engine's options, the state
    dir, the specs named by id (rollback, verify), the run's context (texts, rewrites,
    counts) and pip's texts of files (WheelTexts)."""

    specs: list[PatchSpec]
    opts: Options
    state_dir: str | None
    ids: Sequence[str]
    ctx: RunContext
    pristine: Pristine


class HostCommand:
    """One command across the targets, as pip has one class per command: what is its own
    (options, the run on one host, the report, the exit rule) is a method a subclass
    overrides; the run across the targets (`_run`) is theirs in common."""

    name: ClassVar[str]
    spec_nargs: ClassVar[str] = "+"  # "*": no SPEC names everything vpatch did there
    by_id: ClassVar[bool] = False  # a SPEC may be a spec id, known from the journal alone
    rewrites: ClassVar[bool] = True  # plans rewrites: libcst is loaded while hosts connect
    # on_host is the one engine command a host's session serves (it is closed right after):
    # its final request may end the session (RunContext.ends_sessions, protocol.LAST)
    ends_sessions: ClassVar[bool] = True
    # writes nothing on the targets: `--kubectl NS -l SELECTOR` may pick them (an audit)
    audits: ClassVar[bool] = False

    def add_options(self, p: argparse.ArgumentParser) -> None:
        """The options of `vpatch NAME`: SPEC, the targets', then the command's own."""
        p.add_argument("specs", nargs=self.spec_nargs, metavar="SPEC", help=SPEC_HELP)
        _targets.target_options(p, pods=self.audits)
        self.own_options(p)

    def own_options(self, p: argparse.ArgumentParser) -> None:
        """The options only this command has: none here."""

    def options(self, args: argparse.Namespace) -> Options:
        """The engine's options; a usage error here comes before any host is asked anything."""
        from patcher.plan.base import Options

        return Options()

    def on_host(self, run: HostRun, transport: Transport) -> HostResult:
        """The host's result of the command, reached by `transport`."""
        raise NotImplementedError

    def settle(self, hosts: list[HostResult], ids: Sequence[str]) -> None:
        """What is judged across the hosts once every one has answered: nothing here."""

    def ok(self, host: HostResult) -> bool:
        """Whether a host is in the state this command asks for: it answered, and every spec
        ended in one of its good outcomes (patcher.result.GOOD[name]), its checks passed."""
        from patcher.result import host_ok

        return host_ok(self.name, host)

    def exit_code(self, result: RunResult, unsupported: bool) -> ExitCode:
        """The exit rule: 2 when a target holds what vpatch cannot patch (errors.Unsupported:
        no run can succeed there as it is), else 0 when every host is ok, else 1."""
        if unsupported:
            return ExitCode.UNSUPPORTED
        return ExitCode.OK if result.ok else ExitCode.FAILED

    def finish(self, result: RunResult, args: argparse.Namespace, code: int) -> int:
        """Report the result; the exit status (`code`, the exit rule's, here)."""
        self.report(result, args)
        return code

    def report(self, result: RunResult, args: argparse.Namespace) -> None:
        """The result for a person (stdout), or the JSON document; then the problems."""
        from patcher.output.report import render_human, render_json, render_problems

        if args.json:
            render_json(result)
        else:
            render_human(result, show_diff=getattr(args, "diff", False))
        if not result.ok:
            render_problems(result)


class Apply(HostCommand):
    name = "apply"

    def own_options(self, p: argparse.ArgumentParser) -> None:
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

    def options(self, args: argparse.Namespace) -> Options:
        from patcher.plan.base import Options

        return Options(dry_run=args.dry_run, force=args.force, level=args.level, adopt=args.adopt)

    def on_host(self, run: HostRun, transport: Transport) -> HostResult:
        from patcher.run import engine

        return engine.apply(
            run.specs, transport, run.opts, run.state_dir, run.pristine, ctx=run.ctx
        )


class Verify(HostCommand):
    name = "verify"
    audits = True
    by_id = True

    def own_options(self, p: argparse.ArgumentParser) -> None:
        _targets.level_option(p)
        _metrics_options(p)

    def options(self, args: argparse.Namespace) -> Options:
        from patcher.plan.base import Options

        return Options(level=args.level, **_metrics_values(args))

    def on_host(self, run: HostRun, transport: Transport) -> HostResult:
        from patcher.run import engine

        return engine.verify(
            run.specs, transport, run.opts, run.state_dir, run.ids, run.pristine, ctx=run.ctx
        )


class Rollback(HostCommand):
    name = "rollback"
    spec_nargs = "*"
    by_id = True
    rewrites = False

    def own_options(self, p: argparse.ArgumentParser) -> None:
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

    def options(self, args: argparse.Namespace) -> Options:
        from patcher.plan.base import Options

        return Options(dry_run=args.dry_run, force=args.force, level=args.level)

    def on_host(self, run: HostRun, transport: Transport) -> HostResult:
        from patcher.run import engine

        # no SPEC: everything vpatch did there
        return engine.rollback(
            run.specs or None, transport, run.opts, run.state_dir, run.ids, ctx=run.ctx
        )

    def settle(self, hosts: list[HostResult], ids: Sequence[str]) -> None:
        """`rollback ID` where no target that answered has ID applied: most likely a typo (a
        spec FILE with nothing to roll back is fine: that is what a second rollback meets).
        Such an id fails on every target, so the run exits 1 with a hint."""
        if not ids:
            return
        for sid in ids:
            found = [p for h in hosts if h.error is None for p in h.patches if p.id == sid]
            if not found or any(p.outcome != "not_applied" for p in found):
                continue
            for p in found:
                p.outcome = "failed"
                p.message = f"{sid} is applied on none of the targets: nothing to roll back"
        for h in hosts:
            h.ok = self.ok(h)


FORMATS = ("text", "json", "prometheus", "nagios")


class Status(HostCommand):
    name = "status"
    audits = True
    spec_nargs = "*"
    rewrites = False

    def own_options(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--format",
            choices=FORMATS,
            metavar="FORMAT",
            help="text (default), json (as --json), prometheus (node_exporter's textfile "
            "format: a gauge per host, spec and state) or nagios (one plugin line; exit 0 OK, "
            "1 WARNING, 2 CRITICAL, 3 UNKNOWN, bad input included)",
        )
        p.add_argument(
            "-o",
            "--output",
            metavar="FILE",
            help="with --format prometheus: write the textfile to FILE atomically (a temp file "
            "in its directory, then renamed: node_exporter never reads half a file)",
        )

    def options(self, args: argparse.Namespace) -> Options:
        """--format and -o agree with each other and with --json, and -o names a file vpatch
        may replace: checked before any host is asked anything (exit 2; 3 with nagios)."""
        from patcher.plan.base import Options

        fmt = args.format or ("json" if args.json else "text")
        if args.json and fmt != "json":
            raise UsageError(f"--json and --format {fmt} contradict each other", "give one")
        if args.output is not None:
            if fmt != "prometheus":
                raise UsageError("-o/--output FILE needs --format prometheus", "add it")
            from patcher import safewrite

            safewrite.check(args.output, "-o")
        args.format = fmt
        return Options()

    def on_host(self, run: HostRun, transport: Transport) -> HostResult:
        from patcher.run import engine

        return engine.status(run.specs, transport, run.opts, run.state_dir, ctx=run.ctx)

    def settle(self, hosts: list[HostResult], ids: Sequence[str]) -> None:
        """Every host's `state` in one word (patcher.plan.monitor.host_state)."""
        from patcher.plan import monitor

        for h in hosts:
            h.state = monitor.host_state(h)

    def finish(self, result: RunResult, args: argparse.Namespace, code: int) -> int:
        """text and json as every command; nagios: the plugin's lines on stdout, nothing on
        stderr (Icinga shows a check's stderr too), its code (patcher.plan.monitor.NAGIOS);
        prometheus: the textfile (with `code` in it) on stdout or in -o FILE, the problems on
        stderr, `code`."""
        from patcher.output.lines import put
        from patcher.plan import feeds

        if args.format in ("text", "json"):
            return super().finish(result, args, code)
        if args.format == "nagios":
            nagios, lines = feeds.nagios(result.hosts)
            put(lines)
            return nagios
        text = feeds.prometheus(result.hosts, code)
        if args.output is None:
            put(text.rstrip("\n"))
        else:
            _write_textfile(args.output, text)
        if not result.ok:
            from patcher.output.report import render_problems

            render_problems(result)
        return code


def _write_textfile(path: str, text: str) -> None:
    """-o FILE: the textfile, atomically (patcher.safewrite); a disk that fails the write is
    one `error:` (exit 1: the hosts were asked, nothing of FILE changed), never a traceback in
    a timer's journal."""
    from patcher import safewrite
    from patcher.errors import VpatchError

    try:
        safewrite.write(path, text, "-o")
    except OSError as exc:
        raise VpatchError(
            f"-o {path}: cannot write it: {exc.strerror or exc}; the file is as it was",
            "check the space and the permissions of its directory",
        ) from None


class Ensure(HostCommand):
    name = "ensure"
    ends_sessions = False  # an apply, then its checks, on one session (run.ensure)

    def own_options(self, p: argparse.ArgumentParser) -> None:
        _targets.ensure_level(p)
        p.add_argument("--force", action="store_true", help=_FORCE_HELP)

    def options(self, args: argparse.Namespace) -> Options:
        from patcher.run import ensure

        return ensure.ensure_options(args.level, args.force)

    def on_host(self, run: HostRun, transport: Transport) -> HostResult:
        from patcher.run import ensure

        return ensure.ensure(run.specs, transport, run.opts, run.state_dir, ctx=run.ctx)

    def report(self, result: RunResult, args: argparse.Namespace) -> None:
        """A pre-start hook's terse lines (they land in a log), its own error lines among
        them; the JSON document as the others'."""
        if args.json:
            super().report(result, args)
            return
        from patcher.commands import _ensureview

        _ensureview.render_ensure(result)


HOST_COMMANDS: dict[str, HostCommand] = {
    "apply": Apply(),
    "verify": Verify(),
    "rollback": Rollback(),
    "status": Status(),
    "ensure": Ensure(),
}


def add_options(p: argparse.ArgumentParser, name: str) -> None:
    """The options of `vpatch NAME` (apply, verify, rollback, status or ensure)."""
    HOST_COMMANDS[name].add_options(p)


def _one_host(
    command: HostCommand,
    target: Target,
    args: argparse.Namespace,
    run: HostRun,
    early: Transport | HostError | None,
) -> HostResult:
    """Connect (or take the transport _start_early opened), run the command, close; any
    per-host failure becomes that host's error."""
    from patcher.run import engine

    try:
        if isinstance(early, HostError):
            raise early
        transport = early if early is not None else _targets.open_target(target, args)
    except HostError as exc:
        return engine.connect_error(target.name, exc)
    try:
        return command.on_host(run, transport)
    finally:
        transport.close()


def run(args: argparse.Namespace) -> int:
    from patcher.output import progress

    command = HOST_COMMANDS[args.command]
    # One host on a terminal: a live line from the start (the specs load, the host connects,
    # its probes run), erased before the result prints. A fleet has its bar (progress_for).
    one = not args.ray and len(args.host) <= 1 and not args.inventory
    one = one and not getattr(args, "kubectl", None)
    with progress.live(f"{command.name}: starting") if one else nullcontext():
        return _run(command, args)


def _run(command: HostCommand, args: argparse.Namespace) -> int:
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
        specs, ids, opts = _prepare(command, args)
        if args.ray:
            targets = _targets.targets(args)
            policy = _targets.policy(args, len(targets))
    except BaseException:
        _targets._close_early(early)  # a session started early and never asked is killed
        raise
    from patcher.output.report import progress_for, write_report
    from patcher.result import RunResult
    from patcher.run.exchange import RunContext

    ctx = RunContext()  # what this run's hosts share: texts, rewrites, counts
    ctx.hosts.defer = True  # the hosts' answers are written once, at the end (factcache)
    ctx.ends_sessions = command.ends_sessions
    pristine = WheelTexts(getattr(args, "wheelhouse", []), getattr(args, "refresh", False))
    shared = HostRun(specs, opts, args.state_dir, ids, ctx, pristine)
    try:
        with progress_for(len(targets), args.json or progress.quiet()) as bar:
            hosts = fleet.run(
                [t.name for t in targets],
                lambda i: _one_host(command, targets[i], args, shared, early.pop(i, None)),
                policy,
                [(s.id, s.package) for s in specs] + [(i, "?") for i in ids],
                bar,
            )
    finally:
        _targets._close_early(early)  # started early, never run (Ctrl-C, max-fail)
        progress.stop_live()  # the result and errors print on a clean terminal
        ctx.flush()
    command.settle(hosts, ids)
    _targets.name_transports(hosts, targets, args)
    stats = ctx.stats()
    result = RunResult(command.name, all(h.ok for h in hosts), hosts, stats)
    if args.report:
        write_report(result, args.report)
    return command.finish(result, args, command.exit_code(result, bool(ctx.unsupported)))


def _prepare(
    command: HostCommand, args: argparse.Namespace
) -> tuple[list[PatchSpec], list[str], Options]:
    """The specs (or, for rollback/verify, spec ids) and the engine's options; every usage
    error here comes before any host is asked anything. The engine is imported here, in the
    main thread while the first hosts' sessions start, not by the fleet's workers."""
    from patcher.caches.rewrites import covers
    from patcher.run import engine  # noqa: F401
    from patcher.specs import catalog

    ids: list[str] = []
    if command.by_id:
        specs, ids = catalog.load_or_ids(args.specs)
    else:
        specs = catalog.load_all(args.specs) if args.specs else []
    if command.rewrites and not covers(specs):
        _prefetch_rewriters()
    return specs, ids, command.options(args)


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
    _targets.metrics_profile_option(p)


def _metrics_values(args: argparse.Namespace) -> dict[str, Any]:
    """verify's --metrics/--min-acceptance, checked before any host is contacted (exit 2)."""
    url, rate = getattr(args, "metrics", None), getattr(args, "min_acceptance", None)
    window = getattr(args, "metrics_window", None)
    if rate is not None and url is None:
        raise UsageError("--min-acceptance needs --metrics URL", "add --metrics URL")
    if window is not None and url is None:
        raise UsageError("--metrics-window needs --metrics URL", "add --metrics URL")
    profile = getattr(args, "metrics_profile", None)
    if profile is not None and url is None:
        raise UsageError("--metrics-profile needs --metrics URL", "add --metrics URL")
    if url is None:
        return {"metrics_url": None, "min_acceptance": None, "metrics_window": None}
    from patcher.serving import metrics

    return {
        "metrics_profile": profile or "vllm",
        "metrics_url": metrics.check_url(url),
        "min_acceptance": metrics.parse_rate(rate) if rate is not None else None,
        "metrics_window": metrics.parse_window(window) if window is not None else None,
    }


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
