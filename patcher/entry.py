"""The `vpatch` console script: answers `--version` before anything is imported.

`vpatch --version` is what hooks and inventory scripts call to see whether vpatch is there at
all. `patcher.cli` imports little at the top (each command imports what it uses), but it still
builds the whole argument parser, every subcommand with its options; `--version` needs none of
that, so it is answered here from `patcher.__version__` alone (an interpreter's start and
nothing else), and every other command goes on to the real CLI.
"""

from __future__ import annotations

import sys


def main() -> int:
    if sys.argv[1:] == ["--version"]:
        from patcher import __version__
        from patcher.output.lines import put

        put(f"vpatch {__version__}")
        return 0
    from patcher import cli
    from patcher.exitcodes import finish

    finish(cli.main())
