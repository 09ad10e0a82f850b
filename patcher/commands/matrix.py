"""`vpatch matrix`: does a spec fit every release of its package (patcher.wheels.matrix decides, no
host needed)? Exit 0 when the spec fits every release in range; 1 when one is anchor_missing,
ambiguous, not_covered or failed (or pip lists none); 2 for a bad spec or range."""

from __future__ import annotations

import argparse

from patcher.commands import _targets
from patcher.commands._help import SPEC_HELP
from patcher.errors import UsageError
from patcher.exitcodes import of


def add_options(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("spec", metavar="SPEC", help=SPEC_HELP)
    p.add_argument(
        "--versions",
        metavar="SPECIFIER",
        help="PEP 440 range, e.g. '>=0.11' (default: from the oldest release the spec covers)",
    )
    p.add_argument("--pre", action="store_true", help="include pre-releases")
    p.add_argument("--jobs", type=int, default=4, metavar="N", help="downloads at once (4)")
    _targets.platform_option(p)
    _targets.wheelhouse_option(p)
    _targets.json_option(p)


def run(args: argparse.Namespace) -> int:
    from patcher.commands import _matrixview  # rich: only once there is a table to show
    from patcher.specs import catalog
    from patcher.wheels import matrix

    [spec] = catalog.load_all([args.spec])
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1", "e.g. --jobs 4")
    from patcher.wheels.store import DownloadProgress, Store

    progress = _matrixview.progress_for(args.json)
    store = Store.for_run(  # the matrix's bar says
        args.wheelhouse, args.platform, DownloadProgress(), refresh=args.refresh
    )
    table, _stats = matrix.build(
        spec,
        versions=args.versions,
        pre=args.pre,
        jobs=args.jobs,
        platforms=args.platform,
        progress=progress,
        store=store,
    )
    if args.json:
        _matrixview.render_json(table)
    else:
        _matrixview.render_human(table)
    return of(table.ok)
