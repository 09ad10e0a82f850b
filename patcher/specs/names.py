"""Names vpatch checks before anything else: the one definition of a spec id.

Pure and free of pydantic, so that telling an id from a path (rollback by journal id, the
catalog's lookup) costs nothing, and `patcher.specs.model` and `patcher.specs.catalog` both import
it
without importing each other.
"""

from __future__ import annotations

import re

# What a spec id may be (patcher.specs.model validates `id` with it; JSON Schema's pattern too):
# use fullmatch.
ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
