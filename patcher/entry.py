"""The `vpatch` console script: answers `--version` before anything is imported.

`patcher.cli` imports the spec models (pydantic builds them at import), the planner and the
transports: ~0.2-0.3 s on a loaded machine, paid by every command. `vpatch --version` is what
hooks and inventory scripts call to see whether vpatch is there at all; it needs none of that,
so it is answered here from `patcher.__version__` alone, and every other command goes on to
the real CLI.
"""

from __future__ import annotations

import sys


def main() -> int:
    if sys.argv[1:] == ["--version"]:
        from patcher import __version__

        print(f"vpatch {__version__}")
        return 0
    from patcher.cli import main as cli_main

    return cli_main()
