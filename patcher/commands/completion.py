"""`vpatch completion`: a shell's completion script (patcher.commands._completion has shtab write it
from the whole parser), and the host and group names the scripts ask for while a person types."""

from __future__ import annotations

import argparse

from patcher.errors import UsageError
from patcher.exitcodes import ExitCode


def add_options(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument(
        "shell", choices=("bash", "zsh", "fish"), nargs="?", help="the shell: bash, zsh or fish"
    )
    p.add_argument(
        "--names",
        choices=["hosts", "groups"],
        help="print what --host / --group complete to, one a line (the scripts ask this)",
    )
    p.add_argument("--inventory", metavar="FILE", help="with --names: the inventory to read")
    p.add_argument("--ssh-config", metavar="FILE", help="with --names hosts: instead of ~/.ssh")


def run(args: argparse.Namespace) -> int:
    from patcher.commands import _completion

    if args.names:
        for name in _completion.names(args.names, args.inventory, args.ssh_config):
            print(name)
        return ExitCode.OK
    if args.shell is None:
        raise UsageError(
            "completion needs a shell: bash, zsh or fish", "e.g. vpatch completion bash"
        )
    from patcher.commands import build_parser  # the registry, not another command

    print(_completion.script(args.shell, build_parser()), end="")
    return ExitCode.OK
