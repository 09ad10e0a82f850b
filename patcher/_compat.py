"""The controller runs on Python 3.10+: what 3.10 lacks comes from a backport here, imported
by every module that needs it (never `import tomllib` directly: 3.10 has no such module)."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # tomli is the library tomllib was made from: same API, same errors
    import tomli as tomllib

__all__ = ["tomllib"]
