"""`vpatch`, the distribution's own name as an import: `python -m vpatch` runs the CLI.

The code lives in the `patcher` package (its modules, the agent bundle sent to hosts and the
Ansible collection import it by that name); this package only forwards to it, so both names
work and neither copies anything.
"""

from __future__ import annotations

from patcher import __version__

__all__ = ["__version__"]
