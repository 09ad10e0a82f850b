"""The `vpatch` console script: answers `--version` before anything is imported.

`vpatch --version` is what hooks and inventory scripts call to see whether vpatch is there at
all. `patcher.cli` imports little at the top (each command imports what it uses), but it still
builds the whole argument parser, every subcommand with its options; `--version` needs none of
that, so it is answered here from `patcher.__version__` alone (an interpreter's start and
nothing else), and every other command goes on to the real CLI.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself is not imported: `--version` stays an interpreter's start
if TYPE_CHECKING:
    from typing import NoReturn


def main() -> int:
    if sys.argv[1:] == ["--version"]:
        from patcher import __version__

        print(f"vpatch {__version__}")
        return 0
    from patcher.cli import main as cli_main

    finish(cli_main())


def finish(code: int) -> NoReturn:
    """Exit now, skipping the interpreter's teardown: tearing down pydantic's schemas and every
    other module object costs ~25 ms, a tenth of a one-host apply, and serves nothing once a
    command has returned. By then every file vpatch wrote is closed (atomic writes), every
    child reaped (each transport is closed before its host's result exists), stdout and
    stderr flushed (cli.main); the one thread that can still run, the libcst prefetch
    (daemon), only imports."""
    import os

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # cli.main flushed and handled a closed reader already
    os._exit(code)
