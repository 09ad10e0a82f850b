"""`patcher.authoring.sameast` (pure): a run of module-level imports is what it imports; its
order and how it is split do not count, an import moved past other code does, and a run
that binds a name twice (the last binding wins) is compared as written."""

from __future__ import annotations

import ast

import pytest

from patcher.authoring import sameast


def same(a: str, b: str) -> bool:
    return sameast.dump(ast.parse(a)) == sameast.dump(ast.parse(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("from m import (a, b, c)\n", "from m import a, c, b\n"),
        ("from m import a, b\nimport os\n", "import os\nfrom m import a\nfrom m import b\n"),
        ("import os, sys\nX = 1\n", "import sys\nimport os\nX = 1\n"),
        ("from .i import A as B\n", "from .i import A as B\n"),
    ],
)
def test_the_same_names_imported(a: str, b: str) -> None:
    assert same(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("import os\nX = 1\nimport sys\n", "import os\nimport sys\nX = 1\n"),  # moved past code
        ("from m import a\n", "from n import a\n"),
        ("from m import a\n", "from .m import a\n"),
        ("from m import a as b\n", "from m import a\n"),
        ("from a import x\nfrom b import x\n", "from b import x\nfrom a import x\n"),  # who wins
        ("def f():\n    import a, b\n", "def f():\n    import b, a\n"),  # a def's own order
    ],
)
def test_not_the_same(a: str, b: str) -> None:
    assert not same(a, b)
