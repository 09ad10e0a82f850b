"""What the docs (docs/ and the README) never say: an issue or pull request number. The
tracker is the project's working record, not the reader's: a doc says what is so and where
the code or the test that shows it lives, and a number it cites is a page the reader cannot
open (or one that was closed, not merged)."""

from __future__ import annotations

import re

from tests.conftest import REPO

# "issue 41", "issues 37 and 40", "vLLM issue #31254", "PR 32079", ".../pull/123", a bare
# "#123"; not a heading anchor (`#the-rooms`), nor `&#123;`, nor code (`name#2`/`#3`).
CITED = re.compile(r"\b[Ii]ssues? #?\d+|\bPRs? #?\d+|/(?:pull|issues)/\d+|(?<![\w/&])#\d+\b")
CODE = re.compile(r"`[^`]*`")


def cites(text: str) -> bool:
    """Whether prose (inline code left out) cites an issue or pull request by number."""
    return bool(CITED.search(CODE.sub("", text)))


def docs() -> list[str]:
    """Every line of the docs as `path:line: text`."""
    files = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
    return [
        f"{path.relative_to(REPO)}:{n}: {text.strip()}"
        for path in files
        for n, text in enumerate(path.read_text().splitlines(), 1)
    ]


def test_docs_cite_no_issue_or_pull_request_numbers() -> None:
    assert [line for line in docs() if cites(line.split(": ", 1)[1])] == []


def test_the_rule_can_fail() -> None:
    for cited in ("(issue 41)", "issues 37", "vLLM issue #31254", "PR 32079", "fixed in #42",
                  "github.com/vllm-project/vllm/pull/32079"):  # fmt: skip
        assert cites(cited), cited
    for fine in ("`name#2`/`#3`", "[the rooms](#the-rooms)", "&#123;", "python3.12", "x#1"):
        assert not cites(fine), fine
