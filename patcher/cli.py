"""Command line: argument parsing and exit codes, nothing else.

Exit codes: 0 every host in the desired state; 1 a host failed, drifted, missed an anchor or
was unreachable; 2 bad input or usage (nothing contacted, nothing written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from patcher import __version__, catalog, engine
from patcher.errors import HostError, UsageError, VpatchError
from patcher.report import render_human, render_json
from patcher.result import HostResult, RunResult
from patcher.spec import PatchSpec
from patcher.transport import LocalTransport, Transport


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


def _transports(args: argparse.Namespace) -> list[str]:
    hosts: list[str] = args.host or ["local"]
    for h in hosts:
        if h != "local":
            raise UsageError(
                f"--host {h}: SSH targets are not available in this build",
                "use --host local (default) with --python pointing at the environment",
            )
    return hosts


def _open(target: str, args: argparse.Namespace) -> Transport:
    return LocalTransport(args.python, target=target)


def run(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    specs = catalog.load_all(args.specs) if args.specs else []
    opts = engine.Options(
        dry_run=getattr(args, "dry_run", False),
        force=getattr(args, "force", False),
        level=getattr(args, "level", "full"),
    )
    targets = _transports(args)
    hosts: list[HostResult] = []
    for target in targets:
        try:
            transport = _open(target, args)
        except HostError as exc:
            hosts.append(engine.connect_error(target, exc))
            continue
        try:
            hosts.append(_dispatch(args.command, specs, transport, opts, args.state_dir))
        finally:
            transport.close()
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
