# spec: {"op": "ensure_import", "code": "from __future__ import annotations"}
# status: changed
"""Docstring."""

import os

x = os.sep
# output
"""Docstring."""

from __future__ import annotations

import os

x = os.sep
