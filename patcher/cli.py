"""Command line: argument parsing and exit codes, nothing else.

Exit codes: 0 every host in the desired state; 1 a host failed, drifted, missed an anchor or
was unreachable; 2 bad input or usage (nothing contacted, nothing written).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

from patcher import __version__, catalog, engine
from patcher.errors import HostError, UsageError, VpatchError
from patcher.report import render_human, render_json
from patcher.result import HostResult, RunResult
from patcher.spec import PatchSpec
from patcher.transport import LocalTransport, SshOptions, SshTransport, Transport, parse_target


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see `{self.prog} --help`")


def _target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="TARGET",
        help="'local' (default) or [ssh://][user@]host[:port]; repeatable",
    )
    p.add_argument("--python", default="python3", help="target interpreter (default: python3)")
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
    ssh.add_argument("--sudo", action="store_true", help="run the agent through `sudo -n`")
    ssh.add_argument("--connect-timeout", type=float, default=10.0, metavar="S")
    ssh.add_argument("--timeout", type=float, default=600.0, metavar="S", help="per agent call")
    p.add_argument(
        "--parallel", type=int, default=16, metavar="N", help="hosts at once (default 16)"
    )
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vpatch", description="Declarative, verified, reversible source patches.")
    parser.add_argument("--version", action="version", version=f"vpatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ap = sub.add_parser("apply", help="apply specs (then verify) on the targets")
    ap.add_argument("specs", nargs="+", metavar="SPEC")
    _target_options(ap)
    _level(ap)
    ap.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")
    ap.add_argument("--diff", action="store_true", help="print unified diffs")
    ap.add_argument("--force", action="store_true", help="patch files not pristine per RECORD")

    vp = sub.add_parser("verify", help="check that specs are in effect on the targets")
    vp.add_argument("specs", nargs="+", metavar="SPEC")
    _target_options(vp)
    _level(vp)

    rp = sub.add_parser("rollback", help="restore exact bytes (no SPEC: everything vpatch applied)")
    rp.add_argument("specs", nargs="*", metavar="SPEC")
    _target_options(rp)
    rp.add_argument("--dry-run", action="store_true")
    rp.add_argument("--diff", action="store_true")
    rp.add_argument("--force", action="store_true", help="restore even if the file drifted")

    sp = sub.add_parser("status", help="what vpatch applied on the targets and whether it holds")
    sp.add_argument("specs", nargs="*", metavar="SPEC")
    _target_options(sp)
    return parser


def _targets(args: argparse.Namespace) -> list[str]:
    """Validated up front, so a typo in the 5th --host fails before the 1st is contacted."""
    hosts: list[str] = args.host or ["local"]
    for h in hosts:
        if h != "local":
            parse_target(h)
    if args.parallel < 1:
        raise UsageError("--parallel must be at least 1", "e.g. --parallel 16")
    for name in ("ssh_config", "identity"):
        value = getattr(args, name)
        if value and not os.path.isfile(value):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} {value}: no such file", f"pass an existing file to {flag}")
    return hosts


def _open(target: str, args: argparse.Namespace) -> Transport:
    if target == "local":
        return LocalTransport(args.python, target=target)
    return SshTransport(
        target,
        SshOptions(
            python=args.python,
            ssh_config=args.ssh_config,
            identity=args.identity,
            known_hosts=args.known_hosts,
            accept_new_host_key=args.accept_new_host_key,
            sudo=args.sudo,
            connect_timeout=args.connect_timeout,
            call_timeout=args.timeout,
        ),
    )


def _one_host(
    target: str, args: argparse.Namespace, specs: list[PatchSpec], opts: engine.Options
) -> HostResult:
    """Connect, run the command, close; any per-host failure becomes that host's error."""
    try:
        transport = _open(target, args)
    except HostError as exc:
        return engine.connect_error(target, exc)
    try:
        return _dispatch(args.command, specs, transport, opts, args.state_dir)
    finally:
        transport.close()


def run(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    specs = catalog.load_all(args.specs) if args.specs else []
    opts = engine.Options(
        dry_run=getattr(args, "dry_run", False),
        force=getattr(args, "force", False),
        level=getattr(args, "level", "full"),
    )
    targets = _targets(args)
    with ThreadPoolExecutor(max_workers=min(args.parallel, len(targets))) as pool:
        hosts = list(pool.map(lambda t: _one_host(t, args, specs, opts), targets))
    result = RunResult(args.command, all(h.ok for h in hosts), hosts)
    if args.json:
        render_json(result)
    else:
        render_human(result, show_diff=getattr(args, "diff", False))
    return 0 if result.ok else 1


def _dispatch(
    command: str,
    specs: list[PatchSpec],
    transport: Transport,
    opts: engine.Options,
    state_dir: str | None,
) -> HostResult:
    if command == "apply":
        return engine.apply(specs, transport, opts, state_dir)
    if command == "verify":
        return engine.verify(specs, transport, opts, state_dir)
    if command == "rollback":
        return engine.rollback(specs or None, transport, opts, state_dir)
    return engine.status(specs, transport, opts, state_dir)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = run(sys.argv[1:] if argv is None else argv)
    except VpatchError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        code = 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
