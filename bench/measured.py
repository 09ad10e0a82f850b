"""Which vpatch the bench measures: the one a user runs, when `make bench` says so.

`make bench` installs this tree the way the README says users install it (its own venv, a
non-editable install with only the runtime dependencies, as pipx or `uv tool install` make)
and names its `vpatch` in $VPATCH_BENCH_VPATCH. Without it (`python -m bench.run` by hand, the
smoke test) the rows measure the dev venv's editable install, whose start pays for an
editable-install finder and the entry points of ~85 distributions (test, docs and bench
tools) that a user's install does not have.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "VPATCH_BENCH_VPATCH"


def vpatch_argv() -> list[str]:
    """The vpatch command the rows run."""
    chosen = os.environ.get(ENV)
    if chosen:
        return [chosen]
    script = Path(sys.executable).parent / "vpatch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "patcher.cli"]


def vpatch_install() -> str:
    """Which vpatch the rows measure, in words for the results' machine line."""
    chosen = os.environ.get(ENV)
    if chosen:
        return f"installed as users install it: {chosen}"
    return "the dev venv's editable install"
