# spec: {"op": "ensure_import", "code": "import functools"}
# status: changed
"""No imports yet."""
# a header comment below the docstring


def f():
    return 1
# output
"""No imports yet."""

import functools
# a header comment below the docstring


def f():
    return 1
