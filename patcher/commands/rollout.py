"""`vpatch rollout`: apply's targets and checks, then per host restart, health and live-metric
gates, rolled back when worse (patcher.rolloutrun; docs/rollout.md)."""

from __future__ import annotations

import argparse

from patcher.clidocs import SPEC_HELP
from patcher.commands import _targets


def add_options(op: argparse.ArgumentParser, name: str) -> None:
    """apply's options, then rollout's own (patcher.rolloutrun.add_options)."""
    op.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    _targets.target_options(op)
    _targets.level_option(op)
    op.add_argument("--force", action="store_true", help="patch files not pristine per RECORD")
    from patcher import rolloutrun

    rolloutrun.add_options(op)


def run(args: argparse.Namespace) -> int:
    from patcher import rolloutrun

    targets = _targets.targets(args)
    policy = _targets.policy(args, len(targets))
    return rolloutrun.command(args, targets, policy, lambda t: _targets._open(t, args))
