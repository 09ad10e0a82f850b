"""Command line: argument parsing and exit codes, nothing else.

Exit codes: 0 every host in the desired state; 1 a host failed, drifted, missed an anchor or
was unreachable; 2 bad input or usage (nothing contacted, nothing written).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from select import POLLERR, POLLOUT, poll
from typing import TYPE_CHECKING, Any, NoReturn

# Only what parsing and error reporting need is imported here. Every other module is imported
# by the command that uses it (issue 18: `vpatch apply` should reach its first host in about
# twice an interpreter's start): pydantic and the spec models come with the first spec loaded,
# paramiko with the first SSH target, rich only when a person reads the output, libcst only on
# a rewrite-cache miss. tests/unit/test_startup.py pins what an apply imports.
from patcher import __version__, clidocs
from patcher.clidocs import SPEC_HELP
from patcher.errors import HostError, UsageError, VpatchError

if TYPE_CHECKING:
    from patcher import engine, fleet
    from patcher.inventory import Target
    from patcher.result import HostResult
    from patcher.spec import PatchSpec
    from patcher.transport import Transport


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see `{self.prog} --help`")


class _Skeleton(_Parser):
    """A subcommand this run will not parse (build_parser's `command` is another): listed with
    its help line, its options never built. Building every subcommand's options costs more
    than anything else before the first host is contacted."""

    skeleton = True  # clidocs.describe leaves it undescribed

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        return None

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        return self

    def add_mutually_exclusive_group(self, **kwargs: Any) -> Any:
        return self


def _target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="TARGET",
        help="'local' (default) or [ssh://][user@]host[:port]; repeatable",
    )
    p.add_argument("--python", help="target interpreter (default: python3)")
    p.add_argument(
        "--inventory",
        metavar="FILE",
        help="hosts.toml: [defaults] (user, port, python, identity, sudo) and [[host]] tables "
        "(name, address, groups, and the same fields); or an Ansible INI/YAML inventory "
        "(docs/inventory.md)",
    )
    p.add_argument("--group", action="append", default=[], help="inventory group; repeatable")
    ssh = p.add_argument_group("ssh")
    ssh.add_argument(
        "--ssh-config", metavar="FILE", help="OpenSSH client config (default ~/.ssh/config)"
    )
    ssh.add_argument("--identity", metavar="FILE", help="private key file")
    ssh.add_argument(
        "--known-hosts", metavar="FILE", help="known_hosts file to check host keys against"
    )
    ssh.add_argument(
        "--accept-new-host-key",
        action="store_true",
        help="record unknown host keys instead of refusing them (changed keys are always refused)",
    )
    ssh.add_argument(
        "--sudo",
        action="store_true",
        help="run the agent through `sudo -n` (as root, it works as the environment's owner "
        "when another user owns it: privilege separation, docs/design.md#threat-model)",
    )
    ssh.add_argument(
        "--trusted-python",
        metavar="PATH",
        default="",
        help="root-owned interpreter the agent starts under as root before it drops to the "
        "environment's owner (default /usr/bin/python3)",
    )
    ssh.add_argument("--connect-timeout", type=float, default=10.0, metavar="S")
    ssh.add_argument("--timeout", type=float, default=600.0, metavar="S", help="per agent call")
    ssh.add_argument(
        "--ssh-client",
        choices=("auto", "openssh", "paramiko"),
        default="auto",
        help="the `ssh` program, or paramiko (in-process: the vpatch[paramiko] extra); "
        "auto (default): ssh when on PATH",
    )
    ray = p.add_argument_group("ray (pip install 'vpatch[ray]')")
    ray.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="every alive node of this Ray cluster: auto, HEAD:6379 or ray://HEAD:10001",
    )
    ray.add_argument(
        "--ray-python-map",
        metavar="FILE",
        help="TOML: node id, node name or address = interpreter on that node "
        "(default: --python, else the node's own Python)",
    )
    fleet = p.add_argument_group("fleet")
    fleet.add_argument("--parallel", type=int, default=16, metavar="N", help="hosts at once (16)")
    fleet.add_argument(
        "--canary", metavar="K", help="run the first K hosts first; stop if one fails"
    )
    # metavars are printed as written, help texts %-formatted: one % there, %% here.
    fleet.add_argument("--batch", metavar="N|P%", help="rolling batches of N hosts (or P%%)")
    fleet.add_argument(
        "--max-fail", metavar="N|P%", help="stop starting hosts after N failures (or P%% of them)"
    )
    p.add_argument("--report", metavar="FILE", help="also write the JSON document to FILE")
    p.add_argument(
        "--state-dir", help="journal/backup dir on the target (default: <prefix>/.vpatch)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def _level(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--level",
        choices=["static", "import", "full"],
        default="full",
        help="static: hashes+anchors; import: also import in a fresh python -I; full: also probes",
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; with `command`, only that subcommand's options (the rest _Skeleton):
    what parsing `vpatch COMMAND ...` needs."""
    parser = _Parser(prog="vpatch", description="Declarative, verified, reversible source patches.")
    parser.add_argument("--version", action="version", version=f"vpatch {__version__}")

    def parser_class(**kwargs: Any) -> _Parser:
        name = str(kwargs.get("prog", "")).rsplit(" ", 1)[-1]
        return (_Parser if command in (None, name) else _Skeleton)(**kwargs)

    factory: Any = parser_class  # argparse calls it as it would a class
    sub = parser.add_subparsers(dest="command", required=True, parser_class=factory)

    ap = sub.add_parser("apply", help="apply specs (then verify) on the targets")
    ap.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    _target_options(ap)
    _level(ap)
    ap.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")
    ap.add_argument("--diff", action="store_true", help="print unified diffs")
    ap.add_argument("--force", action="store_true", help="patch files not pristine per RECORD")
    ap.add_argument(
        "--adopt",
        action="store_true",
        help="record a hand-edited file that already has the spec's code as applied by it "
        "(pip's bytes, from the wheel, become its backup), so rollback and status work",
    )
    _wheelhouse_option(ap)

    vp = sub.add_parser("verify", help="check that specs are in effect on the targets")
    vp.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    _target_options(vp)
    _level(vp)
    vp.add_argument(
        "--metrics",
        metavar="URL",
        help="also scrape this Prometheus endpoint ON each host (vLLM's /metrics) and check "
        "speculative decoding acceptance (probe `metrics`)",
    )
    vp.add_argument(
        "--min-acceptance",
        metavar="RATE",
        help="fail the metrics probe below this draft acceptance rate (0.4 or 40%%); "
        "overrides the spec's [metrics] min_acceptance_rate",
    )
    vp.add_argument(
        "--metrics-window",
        metavar="SECONDS",
        help="scrape twice, SECONDS apart, and judge only the traffic in between "
        "(default: one scrape, the server's lifetime)",
    )

    rp = sub.add_parser("rollback", help="restore exact bytes (no SPEC: everything vpatch applied)")
    rp.add_argument("specs", nargs="*", metavar="SPEC", help=SPEC_HELP)
    _target_options(rp)
    rp.add_argument("--dry-run", action="store_true")
    rp.add_argument("--diff", action="store_true")
    rp.add_argument("--force", action="store_true", help="restore even if the file drifted")
    rp.add_argument(
        "--level",
        choices=["static", "import", "full"],
        default="full",
        help="checks of the specs that stay, re-run after a partial rollback (undone if one fails)",
    )

    _rollout_parser(sub)

    sp = sub.add_parser("status", help="what vpatch applied on the targets and whether it holds")
    sp.add_argument("specs", nargs="*", metavar="SPEC", help=SPEC_HELP)
    _target_options(sp)
    _hook_parsers(sub)
    _matrix_parser(sub)
    _handedit_parsers(sub)
    _wheel_parser(sub)
    cp = sub.add_parser("completion", help="print a shell completion script")
    cp.add_argument("shell", choices=["bash", "zsh", "fish"], nargs="?")
    cp.add_argument(
        "--names",
        choices=["hosts", "groups"],
        help="print what --host / --group complete to, one a line (the scripts ask this)",
    )
    cp.add_argument("--inventory", metavar="FILE", help="with --names: the inventory to read")
    cp.add_argument("--ssh-config", metavar="FILE", help="with --names hosts: instead of ~/.ssh")
    clidocs.describe(parser, dict(sub.choices))
    return parser


def _rollout_parser(sub: Any) -> None:
    """`vpatch rollout`: apply's options, then its own (patcher.rolloutrun.add_options)."""
    op = sub.add_parser(
        "rollout", help="apply, restart, wait for health, gate on live metrics; roll back if worse"
    )
    op.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    _target_options(op)
    _level(op)
    op.add_argument("--force", action="store_true", help="patch files not pristine per RECORD")
    if not getattr(op, "skeleton", False):
        from patcher import rolloutrun

        rolloutrun.add_options(op)


def _rollout(args: argparse.Namespace) -> int:
    from patcher import rolloutrun

    targets = _targets(args)
    policy = _policy(args, len(targets))
    return rolloutrun.command(args, targets, policy, lambda t: _open(t, args))


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line, options and positionals in any order (`status A --python X B`):
    the subcommand's own parser reads the rest intermixed, as a person types it. argparse
    cannot do that across subparsers, so the command word is looked up first."""
    argv = list(argv)
    first = argv[0] if argv and not argv[0].startswith("-") else None
    parser = build_parser(first)
    sub = _subcommand(parser, first)
    if sub is None:
        return parser.parse_args(argv)
    args = sub.parse_intermixed_args(argv[1:])
    args.command = first
    return args


def _subcommand(parser: argparse.ArgumentParser, name: str | None) -> _Parser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            found = action.choices[name]
            return found if isinstance(found, _Parser) else None
    return None


def _flag_target(args: argparse.Namespace) -> Callable[[str], Target]:
    from patcher.inventory import Target
    from patcher.transport import parse_target

    def make(spec: str) -> Target:
        if spec == "local":
            if args.sudo:  # never dropped silently: the local target runs as vpatch does
                raise UsageError(
                    "--sudo does not apply to the local target", "run vpatch itself with sudo"
                )
            return Target("local", "local", python=args.python or "python3", local=True)
        user, host, port = parse_target(spec)
        return Target(spec, host, user, port, args.python or "python3", args.identity, args.sudo)

    return make


def _targets(args: argparse.Namespace) -> list[Target]:
    """Validated up front, so a typo in the 5th --host fails before the 1st is contacted."""
    if args.parallel < 1:
        raise UsageError("--parallel must be at least 1", "e.g. --parallel 16")
    for flag in ("timeout", "connect_timeout"):
        value = getattr(args, flag)
        if not 0 < value < 1e6:  # also refuses nan and inf (a call that can never time out)
            name = "--" + flag.replace("_", "-")
            raise UsageError(
                f"{name} {value:g}: must be a positive number of seconds", f"e.g. {name} 30"
            )
    for name in ("ssh_config", "identity", "inventory"):
        value = getattr(args, name)
        if value and not os.path.isfile(value):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} {value}: no such file", f"pass an existing file to {flag}")
    if args.ray or args.ray_python_map:
        return _ray_targets(args)
    from patcher.inventory import load_inventory, select

    inv = None
    if args.inventory:
        flags = {"python": args.python, "identity": args.identity, "sudo": args.sudo or None}
        inv = load_inventory(args.inventory, flags)
    targets = select(inv, args.host, args.group, _flag_target(args))
    from patcher import sshnames

    problem = None if all(t.local for t in targets) else sshnames.client_problem(args.ssh_client)
    if problem:
        raise UsageError(*problem)
    return targets


def _ray_targets(args: argparse.Namespace) -> list[Target]:
    """--ray: every alive node of the cluster (patcher.ray_transport, the only module that
    imports ray). Conflicting target flags are refused before the cluster is contacted."""
    if not args.ray:
        raise UsageError("--ray-python-map needs --ray ADDRESS", "e.g. --ray auto")
    given = {
        "--host": args.host,
        "--inventory": args.inventory,
        "--group": args.group,
        "--sudo": args.sudo,
        "--ssh-config": args.ssh_config,
        "--identity": args.identity,
    }
    clash = [flag for flag, value in given.items() if value]
    if clash:
        raise UsageError(
            f"--ray cannot be combined with {', '.join(clash)}",
            "--ray runs on every alive node of the cluster; --python or --ray-python-map "
            "picks each node's interpreter",
        )
    from patcher import ray_transport
    from patcher.inventory import Target

    pymap = ray_transport.load_python_map(args.ray_python_map) if args.ray_python_map else {}
    nodes = ray_transport.nodes(args.ray, args.python, pymap, args.connect_timeout)
    return [Target(n.target, f"ray:{n.node_id}", python=n.python or "") for n in nodes]


def _open(target: Target, args: argparse.Namespace) -> Transport:
    if args.ray:
        from patcher import ray_transport

        return ray_transport.transport_for(target.name, args.timeout)
    from patcher.transport import LocalTransport, SshOptions, SshTransport

    if target.local:
        return LocalTransport(
            target.python,
            target=target.name,
            call_timeout=args.timeout,
            trusted_python=args.trusted_python,
        )
    opts = SshOptions(
        python=target.python,
        ssh_config=args.ssh_config,
        identity=target.identity,
        known_hosts=args.known_hosts,
        accept_new_host_key=args.accept_new_host_key,
        sudo=target.sudo,
        sudo_user=target.sudo_user,
        connect_timeout=args.connect_timeout,
        call_timeout=args.timeout,
        trusted_python=args.trusted_python,
    )
    from patcher import sshnames

    if args.ssh_client == "paramiko" or (args.ssh_client == "auto" and not sshnames.openssh()):
        return SshTransport(target.name, target.address, target.user, target.port, opts)
    from patcher.openssh import OpenSshTransport  # imports no paramiko: runs start faster

    return OpenSshTransport(target.name, target.address, target.user, target.port, opts)


def _one_host(
    target: Target,
    args: argparse.Namespace,
    specs: list[PatchSpec],
    opts: engine.Options,
    ids: Sequence[str] = (),
    early: Transport | HostError | None = None,
    ctx: engine.RunContext | None = None,
) -> HostResult:
    """Connect (or take the transport _start_early opened), run the command, close; any
    per-host failure becomes that host's error."""
    from patcher import engine

    try:
        if isinstance(early, HostError):
            raise early
        transport = early if early is not None else _open(target, args)
    except HostError as exc:
        return engine.connect_error(target.name, exc)
    try:
        return _dispatch(args.command, specs, transport, opts, args.state_dir, ids, ctx)
    finally:
        transport.close()


def run(argv: Sequence[str]) -> int:
    argv, command = _split_exec(list(argv))
    args = parse(argv)
    if getattr(args, "wheelhouse", None):
        from patcher import wheels

        wheels.use_wheelhouses(args.wheelhouse)
    if args.command == "wheel":
        return _wheel(args)
    if args.command == "matrix":
        return _matrix(args)
    if args.command in ("diff", "capture"):
        return _handedit(args)
    if args.command == "backport":
        from patcher import capturecmd

        return capturecmd.backport(args)
    if args.command in ("exec", "hook", "check", "schema", "catalog", "completion"):
        return _standalone(args, command)
    if args.command == "rollout":
        return _rollout(args)
    from patcher import fleet

    # --ray asks a cluster for its nodes: only once the specs are known good. Otherwise the
    # targets come first, and the first hosts' sessions start while the specs load.
    early: dict[int, Transport | HostError] = {}
    if not args.ray:
        targets = _targets(args)
        policy = _policy(args, len(targets))
        early = _start_early(targets, args, policy)
    try:
        specs, ids, opts = _prepare(args)
        if args.ray:
            targets = _targets(args)
            policy = _policy(args, len(targets))
    except BaseException:
        _close_early(early)  # a session started early and never asked is killed
        raise
    from patcher import engine
    from patcher.report import (
        progress_for,
        render_human,
        render_json,
        render_problems,
        write_report,
    )
    from patcher.result import RunResult

    ctx = engine.RunContext()  # what this run's hosts share: texts, rewrites, counts
    try:
        with progress_for(len(targets), args.json) as bar:
            hosts = fleet.run(
                [t.name for t in targets],
                lambda i: _one_host(targets[i], args, specs, opts, ids, early.pop(i, None), ctx),
                policy,
                [(s.id, s.package) for s in specs] + [(i, "?") for i in ids],
                bar,
            )
    finally:
        _close_early(early)  # started early, never run (Ctrl-C, max-fail)
    if args.command == "rollback" and ids:
        _unknown_ids(hosts, ids)
    stats = ctx.stats()
    result = RunResult(args.command, all(h.ok for h in hosts), hosts, stats)
    if args.report:
        write_report(result, args.report)
    if args.json:
        render_json(result)
    elif args.command == "ensure":
        from patcher import hooks

        hooks.render_ensure(result)
    else:
        render_human(result, show_diff=getattr(args, "diff", False))
    if not result.ok and (args.json or args.command != "ensure"):  # ensure prints its own
        render_problems(result)
    if ctx.unsupported:  # errors.Unsupported: no run can succeed there as it is
        return 2
    return 0 if result.ok else 1


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


def _policy(args: argparse.Namespace, total: int) -> fleet.Policy:
    from patcher import fleet

    return fleet.Policy(
        parallel=args.parallel,
        canary=fleet.parse_count("--canary", args.canary, total),
        batch=fleet.parse_count("--batch", args.batch, total),
        max_fail=fleet.parse_count("--max-fail", args.max_fail, total),
    )


def _start_early(
    targets: list[Target], args: argparse.Namespace, policy: fleet.Policy
) -> dict[int, Transport | HostError]:
    """Open the first wave's transports and start their sessions (PipeTransport.start): the
    SSH handshakes and remote interpreters run while this process loads the specs. A host
    that cannot even be opened keeps its error for its turn."""
    from patcher import fleet
    from patcher.transport import PipeTransport

    out: dict[int, Transport | HostError] = {}
    for i in fleet.first_wave(policy, len(targets)):
        try:
            transport = out[i] = _open(targets[i], args)
            if isinstance(transport, PipeTransport):
                transport.start()
        except HostError as exc:
            out[i] = exc
    return out


def _close_early(early: dict[int, Transport | HostError]) -> None:
    for t in early.values():
        if not isinstance(t, HostError):
            t.close()


def _prepare(
    args: argparse.Namespace,
) -> tuple[list[PatchSpec], list[str], engine.Options]:
    """The specs (or, for rollback/verify, spec ids) and the engine's options; every usage
    error here comes before any host is asked anything."""
    from patcher import catalog, engine, rewrite_cache

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
        **_metrics_options(args),
    )
    if args.command == "ensure":
        from patcher import hooks

        opts = hooks.ensure_options(args.level, args.force)
    return specs, ids, opts


def _metrics_options(args: argparse.Namespace) -> dict[str, Any]:
    """verify's --metrics/--min-acceptance, checked before any host is contacted (exit 2)."""
    url, rate = getattr(args, "metrics", None), getattr(args, "min_acceptance", None)
    window = getattr(args, "metrics_window", None)
    if rate is not None and url is None:
        raise UsageError("--min-acceptance needs --metrics URL", "add --metrics URL")
    if window is not None and url is None:
        raise UsageError("--metrics-window needs --metrics URL", "add --metrics URL")
    if url is None:
        return {"metrics_url": None, "min_acceptance": None, "metrics_window": None}
    from patcher import metrics

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
) -> HostResult:
    from patcher import engine

    ctx = ctx if ctx is not None else engine.RunContext()
    if command == "ensure":
        from patcher import hooks

        return hooks.ensure(specs, transport, opts, state_dir, ctx=ctx)
    wanted = specs or None if command == "rollback" else specs  # rollback: no spec = all
    return engine.run(
        command, wanted, transport, opts, ctx, state_dir=state_dir, ids=ids, pristine=_wheel_text
    )


# ---------------------------------------------------------------------------------------------
# Pre-start hooks (patcher.hooks) and patch-repo tools (patcher.check, patcher.schema)


def _ensure_level(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--level",
        choices=["static", "import", "full"],
        default=None,
        help="default: static (journal + hashes) when nothing is written, full after a write; "
        "given: that level after a write AND for specs already in place",
    )


def _hook_parsers(sub: Any) -> None:
    ep = sub.add_parser("ensure", help="apply what is missing, verify; exit 0 only when in place")
    ep.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    _target_options(ep)
    _ensure_level(ep)
    ep.add_argument("--force", action="store_true", help="patch files not pristine per RECORD")

    xp = sub.add_parser(
        "exec",
        help="ensure on the command's python, then exec the command (same PID)",
        usage="vpatch exec SPEC... [--python PATH] [options] -- CMD [ARGS...]",
    )
    xp.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    xp.add_argument("--python", help="interpreter to patch (default: the one CMD runs on)")
    _ensure_level(xp)
    xp.add_argument("--force", action="store_true", help="patch files not pristine per RECORD")
    xp.add_argument("--state-dir", help="journal/backup dir (default: <prefix>/.vpatch)")

    hp = sub.add_parser("hook", help="print a pre-start hook that runs `vpatch ensure`")
    hp.add_argument("kind", choices=["systemd"])
    hp.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    hp.add_argument("--service", required=True, help="unit name, e.g. vllm (vllm.service)")
    hp.add_argument("--python", required=True, help="absolute path of the service's python")
    _ensure_level(hp)
    hp.add_argument("--state-dir", help="journal/backup dir (default: <prefix>/.vpatch)")
    hp.add_argument("--vpatch", metavar="PATH", help="vpatch the unit runs (default: this one)")
    hp.add_argument(
        "--privileged", action="store_true", help="run ensure as root even with User= ('+')"
    )

    cp = sub.add_parser("check", help="validate spec files offline (patch repos, pre-commit)")
    cp.add_argument("paths", nargs="+", metavar="SPEC_OR_DIR")
    cp.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    lp = sub.add_parser("catalog", help="list the spec ids SPEC can name, and where each is from")
    lp.add_argument("--json", action="store_true", help="print one JSON document on stdout")

    sc = sub.add_parser("schema", help="print the JSON Schema of the spec format")
    sc.add_argument(
        "--result",
        action="store_true",
        help="the schema of the --json result document instead (apply, verify, ...)",
    )


def _split_exec(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """`vpatch exec SPEC... -- CMD ARGS`: what follows the first `--` is the command, never
    parsed by vpatch (`vllm serve --port 8000` must not meet vpatch's options)."""
    if argv[:1] != ["exec"] or "--" not in argv:
        return argv, None
    i = argv.index("--")
    return argv[:i], argv[i + 1 :]


def _standalone(args: argparse.Namespace, command: list[str] | None) -> int:
    """Commands that run once, here, rather than across targets."""
    if args.command == "schema":
        from patcher import schema

        print(json.dumps(schema.result_schema() if args.result else schema.spec_schema(), indent=2))
        return 0
    if args.command == "catalog":
        _catalog(args.json)
        return 0
    if args.command == "completion":
        from patcher import completion

        if args.names:
            for name in completion.names(args.names, args.inventory, args.ssh_config):
                print(name)
            return 0
        if args.shell is None:
            raise UsageError(
                "completion needs a shell: bash, zsh or fish", "e.g. vpatch completion bash"
            )
        print(completion.SHELLS[args.shell](build_parser()), end="")
        return 0
    if args.command == "check":
        from patcher import check
        from patcher.report import emit

        report = check.check(args.paths)
        if args.json:
            emit(check.to_json(report))
        check.render(report, None if args.json else sys.stdout, sys.stderr)
        return 0 if report.ok else 2
    if args.command == "hook":
        from patcher import hooks

        extra = [*(["--level", args.level] if args.level else [])]
        extra += ["--state-dir", os.path.abspath(args.state_dir)] if args.state_dir else []
        vp = [args.vpatch] if args.vpatch else None
        text = hooks.systemd_dropin(
            args.service, args.specs, args.python, extra, vp, args.privileged
        )
        print(text, end="")
        return 0
    return _exec(args, command)


def _catalog(as_json: bool) -> None:
    """`vpatch catalog`: each id once, from the first catalog that has it (what SPEC loads)."""
    from patcher import catalog
    from patcher.inert import line
    from patcher.report import emit
    from patcher.result import SCHEMA_VERSION

    found = catalog.entries()
    if as_json:
        emit(
            {
                "schema_version": SCHEMA_VERSION,
                "command": "catalog",
                "ok": True,
                "sources": [{"source": s, "path": str(d)} for s, d in catalog.sources()],
                "specs": [
                    {
                        "id": e.id,
                        "source": e.source,
                        "path": str(e.path),
                        "shadows": [str(p) for p in e.shadows],
                    }
                    for e in found
                ],
            }
        )
        return
    if not found:
        print("no catalog ids (set $VPATCH_CATALOG or run where ./patches is)", file=sys.stderr)
    width = max((len(e.id) for e in found), default=0)
    for e in found:
        hidden = f"  (overrides {', '.join(map(str, e.shadows))})" if e.shadows else ""
        print(line(f"{e.id:<{width}}  {e.source:<15}  {e.path}{hidden}"))


def _exec(args: argparse.Namespace, command: list[str] | None) -> int:
    """ensure, then become CMD; CMD never starts unless every spec is in place."""
    if command is None:
        raise UsageError("exec needs `--` then the command", "vpatch exec SPEC -- vllm serve M")
    from patcher import catalog, hooks
    from patcher.result import RunResult

    specs = catalog.load_all(args.specs)
    exe = hooks.resolve_command(command)
    python = hooks.exec_python(exe, args.python)
    opts = hooks.ensure_options(args.level, args.force)
    from patcher import engine

    ctx = engine.RunContext()
    host = hooks.ensure_local(specs, python, opts, args.state_dir, ctx=ctx)
    # stdout belongs to the command: the hook's lines go to stderr (the service's log).
    hooks.render_ensure(RunResult("ensure", host.ok, [host]), sys.stderr, sys.stderr)
    if not host.ok:
        print(f"error: not starting {command[0]}: patches not in place", file=sys.stderr)
        return 2 if ctx.unsupported else 1
    hooks.exec_command(exe, command)


# ---------------------------------------------------------------------------------------------
# Release matrix (patcher.matrix): does a spec fit every release of its package?


def _matrix_parser(sub: Any) -> None:
    mp = sub.add_parser(
        "matrix", help="check a spec against every release of its package (no host needed)"
    )
    mp.add_argument("spec", metavar="SPEC", help=SPEC_HELP)
    mp.add_argument(
        "--versions",
        metavar="SPECIFIER",
        help="PEP 440 range, e.g. '>=0.11' (default: from the oldest release the spec covers)",
    )
    mp.add_argument("--pre", action="store_true", help="include pre-releases")
    mp.add_argument("--jobs", type=int, default=4, metavar="N", help="downloads at once (4)")
    _platform_option(mp)
    _wheelhouse_option(mp)
    mp.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def _matrix(args: argparse.Namespace) -> int:
    """Exit 0 when the spec fits every release in range; 1 when one is anchor_missing,
    ambiguous, not_covered or failed (or pip lists none); 2 for a bad spec or range."""
    from patcher import catalog, matrix

    [spec] = catalog.load_all([args.spec])
    fits = matrix.command(spec, args.versions, args.pre, args.jobs, args.platform, args.json)
    return 0 if fits else 1


# ---------------------------------------------------------------------------------------------
# Hand edits (patcher.handedit, patcher.capture): what differs from pip's RECORD, as a spec


def _handedit_parsers(sub: Any) -> None:
    dp = sub.add_parser(
        "diff", help="show every file of a package that differs from pip's RECORD, as a diff"
    )
    dp.add_argument("package", metavar="PACKAGE", help="distribution name, e.g. vllm")
    dp.add_argument("files", nargs="*", metavar="FILE", help="only these files (as in RECORD)")
    _target_options(dp)
    _wheelhouse_option(dp)

    cp = sub.add_parser(
        "capture", help="write a spec that reproduces a host's hand edits of a package"
    )
    cp.add_argument("package", metavar="PACKAGE", help="distribution name, e.g. vllm")
    cp.add_argument("files", nargs="*", metavar="FILE", help="only these files (as in RECORD)")
    cp.add_argument("--id", required=True, help="id of the new spec (its file name, too)")
    cp.add_argument("-o", "--output", metavar="SPEC.toml", help="write here (default: stdout)")
    cp.add_argument("--summary", help="the spec's one-line summary")
    cp.add_argument(
        "--versions",
        metavar="SPECIFIER",
        help="the variant's range (default: ==the installed release)",
    )
    cp.add_argument(
        "--no-matrix",
        action="store_true",
        help="skip checking the spec against neighbouring releases",
    )
    cp.add_argument(
        "--neighbours",
        type=int,
        default=3,
        metavar="N",
        help="releases before and after the installed one the matrix checks (3)",
    )
    _target_options(cp)
    _wheelhouse_option(cp)

    bp = sub.add_parser(
        "backport", help="turn an upstream fix (a unified diff) into a spec for older releases"
    )
    bp.add_argument("diff", metavar="DIFF", help="unified diff file (git format), or - (stdin)")
    bp.add_argument("--package", required=True, help="distribution name, e.g. vllm")
    bp.add_argument(
        "--from-version", required=True, metavar="V", help="the release the diff was made against"
    )
    bp.add_argument("--id", required=True, help="id of the new spec (its file name, too)")
    bp.add_argument("-o", "--output", metavar="SPEC.toml", help="write here (default: stdout)")
    bp.add_argument("--summary", help="the spec's one-line summary")
    bp.add_argument("--versions", metavar="SPECIFIER", help="the variant's range (default: ==V)")
    bp.add_argument("--no-matrix", action="store_true", help="skip the neighbouring releases")
    bp.add_argument("--neighbours", type=int, default=3, metavar="N", help="releases each side (3)")
    bp.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    _wheelhouse_option(bp)


def _handedit(args: argparse.Namespace) -> int:
    from patcher import handedit

    if args.command == "capture":
        from patcher import capturecmd

        capturecmd.validate(args)
    targets = _targets(args)
    pristine = handedit.Pristine(args.package)
    scans = handedit.scan_all(
        args.package,
        args.files,
        targets,
        lambda t: _open(t, args),
        args.state_dir,
        args.parallel,
        pristine,
    )
    unavailable = next(iter(pristine.failures.values()), None)
    if args.command == "capture":
        from patcher import capturecmd

        if unavailable is not None:
            raise VpatchError(f"pristine side unavailable: {unavailable.message}", unavailable.hint)
        return capturecmd.run(args, scans)
    from patcher.inert import line
    from patcher.report import emit

    doc = handedit.to_json(args.package, scans)
    if args.report:
        with open(args.report, "w") as fh:
            fh.write(json.dumps(doc, indent=2) + "\n")
    if args.json:
        emit(doc)
    else:
        handedit.render(args.package, scans)
    for s in scans:
        if s.error:
            print(line(f"error: {s.error}"), file=sys.stderr)
    if not doc["ok"]:
        hint = next((s.hint for s in scans if s.hint), None)
        print(line(f"hint: {hint or 'see the errors above'}"), file=sys.stderr)
    elif unavailable is not None:  # the hosts answered; pip's side of their files did not
        print(f"error: pristine side unavailable: {unavailable.message}", file=sys.stderr)
        print(f"hint: {unavailable.hint}", file=sys.stderr)
        return 1
    if any(s.unsupported for s in scans):
        return 2  # an editable install (errors.Unsupported)
    return 0 if doc["ok"] else 1


# ---------------------------------------------------------------------------------------------
# Wheels (patcher.wheels, patcher.wheelbuild): where pip's bytes come from, and patched wheels


def _wheelhouse_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wheelhouse",
        action="append",
        default=[],
        metavar="DIR|FILE",
        help="take release wheels from this directory or wheel file before asking pip (no "
        "network; repeatable; also $VPATCH_WHEELHOUSE)",
    )


def _platform_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--platform",
        action="append",
        default=[],
        metavar="TAG",
        help="wheel platform tag for pip (repeatable; default: this machine's)",
    )


def _wheel_parser(sub: Any) -> None:
    wp = sub.add_parser(
        "wheel", help="build a patched wheel of a release (for images, lock files, indexes)"
    )
    wp.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    wp.add_argument(
        "--package", required=True, metavar="NAME==VERSION", help="the release, e.g. vllm==0.16.0"
    )
    wp.add_argument(
        "-o", "--output-dir", default=".", metavar="DIR", help="write the wheel here (default: .)"
    )
    wp.add_argument(
        "--from-wheel", metavar="FILE", help="patch this wheel file (default: the release's wheel)"
    )
    _platform_option(wp)
    _wheelhouse_option(wp)
    wp.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def _wheel(args: argparse.Namespace) -> int:
    """`vpatch wheel`: exit 0 with the wheel written; 1 when a spec does not fit the release
    or no wheel can be had; 2 for bad input."""
    from pathlib import Path

    from patcher import catalog, wheelbuild, wheels

    package, version = wheelbuild.parse_package(args.package)
    if args.from_wheel:
        wheels.use_wheelhouses([args.from_wheel])
    specs = catalog.load_all(args.specs)
    wheelbuild.check_package(specs, package, version)
    store = wheels.Store(platforms=args.platform, progress=wheels.progress_for(args.json))
    if args.from_wheel:
        store.sources = [Path(args.from_wheel)]
    try:
        wheel = store.wheel(package, version)
    except wheels.CorruptWheel as exc:
        raise VpatchError(exc.message, "pass pip's wheel of the release") from None
    baked = wheelbuild.decide(specs, version, wheel)
    path, sha = wheelbuild.write(wheel, package, version, baked, Path(args.output_dir))
    store.close()
    if args.json:
        from patcher.report import emit
        from patcher.result import SCHEMA_VERSION

        emit(
            {
                "schema_version": SCHEMA_VERSION,
                "command": "wheel",
                "ok": True,
                "wheel": str(path),
                "sha256": sha,
                "package": package,
                "version": str(version),
                "baked_version": baked.version,
                "specs": baked.specs,
            }
        )
        return 0
    for entry in baked.specs:
        files = ", ".join(f["file"] for f in entry["files"]) or "-"
        print(f"{entry['id']}: {entry['outcome']} ({files})")
    print(f"wrote {path}")
    return 0


def _wheel_text(package: str, version: str, rel: str) -> str | None:
    """pip's bytes of a file, from the release's wheel (patcher.handedit): what apply --adopt
    records as the base, and what verify names a hand edit's lines against."""
    from patcher import handedit

    return handedit.wheel_text(package, version, rel)


def _prefetch_rewriters() -> None:
    """libcst costs ~0.3 s to import: do it while the hosts connect and inspect (I/O waits),
    not after, on the critical path. The import lock makes the engine's own import wait.
    Skipped when earlier runs left rewrites of every spec on disk (patcher.rewrite_cache):
    then the run most likely needs no libcst at all, and a miss imports it on demand."""
    import threading

    def load() -> None:
        from patcher.rewrite import elements, statements, values  # noqa: F401

    threading.Thread(target=load, name="vpatch-prefetch", daemon=True).start()


def _wants_json(argv: Sequence[str]) -> bool:
    """--json (or an abbreviation argparse accepts) before any `--`: known even when parsing
    fails, so that error is a JSON document too."""
    for arg in argv:
        if arg == "--":
            return False
        if len(arg) >= 3 and "--json".startswith(arg):
            return True
    return False


def _fail(message: str, hint: str, code: int, as_json: bool) -> int:
    """`error:` and `hint:` on stderr, and with --json the same as one document on stdout."""
    from patcher.inert import clean

    print(clean(f"error: {message}"), file=sys.stderr)
    if hint:
        print(clean(f"hint: {hint}"), file=sys.stderr)
    if as_json:
        from patcher.report import emit, error_document

        emit(error_document(message, hint))
    return code


def _reader_gone() -> bool:
    """Whether stdout or stderr is a pipe whose reader has exited (poll says POLLERR)."""
    poller = poll()
    for stream in (sys.stdout, sys.stderr):
        try:
            poller.register(stream.fileno(), POLLOUT)
        except (AttributeError, ValueError, OSError):
            continue  # replaced by something without a descriptor (tests), or closed
    return any(events & POLLERR for _fd, events in poller.poll(0))


def _quiet_exit() -> int:
    """The reader went away (`vpatch schema | head -2`): stop without a word, as a Unix tool
    killed by SIGPIPE does, and with its status (128 + 13). SIGPIPE itself stays ignored, as
    Python sets it: a dead agent's pipe must be an error vpatch reports, not its death."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())  # what is still buffered goes nowhere, silently
        except (AttributeError, ValueError, OSError):
            continue
    return 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = _wants_json(args)
    try:
        try:
            code = run(args)
        except VpatchError as exc:
            code = _fail(exc.message, exc.hint, exc.exit_code, as_json)
        except KeyboardInterrupt:
            hint = "run `vpatch status` to see what state the targets are in"
            code = _fail("interrupted", hint, 130, as_json)
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        if not _reader_gone():
            raise  # an agent's pipe, not ours: a bug to see, not to hide
        return _quiet_exit()
    return code


if __name__ == "__main__":
    from patcher.entry import finish

    finish(main())
