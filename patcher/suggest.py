""" "did you mean": the closest of the names vpatch knows to one it was given mistyped (a
subcommand, an option, a spec id), by difflib's ratio as git and pip suggest. Pure: the caller
says the names, and puts the words in its `hint:`."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's own default: `aply` -> apply and `--dryrun` -> --dry-run pass it, while an unrelated
# word (`frobnicate`) matches nothing and gets no suggestion rather than a wrong one.
CUTOFF = 0.6


def closest(word: str, names: Iterable[str], n: int = 1) -> list[str]:
    """The names most like `word` (at most `n`, best first); none close enough: []."""
    return difflib.get_close_matches(word, sorted(set(names)), n=n, cutoff=CUTOFF)


def did_you_mean(word: str, names: Iterable[str], shown: str = "{}") -> str:
    """`did you mean X?` (X the closest name, written as `shown` formats it), or "" when no name
    is close enough."""
    found = closest(word, names)
    return f"did you mean {shown.format(found[0])}?" if found else ""
