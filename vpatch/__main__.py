"""`python -m vpatch ...`: the same entry point as the `vpatch` console script."""

from __future__ import annotations

import sys

from patcher.entry import main

if __name__ == "__main__":
    sys.argv[0] = "vpatch"  # what usage and error lines name, not `__main__.py`
    sys.exit(main())
