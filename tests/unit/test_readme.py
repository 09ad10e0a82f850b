"""The README's usage tells the story in order (apply/verify/rollback, then `vpatch rollout`
judged by the serving outcome with `make demo-rollout`, then `vpatch wheel` for the image), and
each of its command lines runs: every `vpatch ...` line is parsed by the parser `vpatch` runs
(options, choices, the spec's catalog id), every `make X` names a target of the Makefile."""

from __future__ import annotations

import re
import shlex

import pytest

from patcher import cli, commands
from patcher.specs import catalog
from tests.conftest import REPO

README = (REPO / "README.md").read_text()
USAGE = README[README.index("## Usage\n") : README.index("\nSPEC is a")]


def _command_lines(text: str) -> list[str]:
    """Each shell line of the ```sh blocks, continuation lines joined, comments dropped."""
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                lines.append(shlex.join(words))
    return lines


LINES = _command_lines(USAGE)
# what one line writes for a later one (`vpatch capture ... -o patches/my-fix.toml`)
WRITTEN = {w[i + 1] for w in map(str.split, LINES) for i, x in enumerate(w[:-1]) if x == "-o"}


def test_the_story_in_order() -> None:
    firsts = [line.split()[:2] for line in LINES]
    order = [firsts.index(["vpatch", word]) for word in ("apply", "rollback", "rollout", "wheel")]
    assert order == sorted(order), firsts
    assert firsts.index(["make", "demo-rollout"]) < firsts.index(["vpatch", "wheel"])


@pytest.mark.parametrize("line", [ln for ln in LINES if ln.startswith("vpatch ")])
def test_every_vpatch_line_parses(line: str) -> None:
    argv, command = cli._split_exec(shlex.split(line)[1:])
    args = commands.parse(argv)
    known = {e.id for e in catalog.Catalog().entries()}
    for spec in getattr(args, "specs", None) or []:
        assert spec in known | WRITTEN or (REPO / spec).exists(), (line, spec)
    assert command is None or command, line


@pytest.mark.parametrize("line", [ln for ln in LINES if ln.startswith("make ")])
def test_every_make_line_is_a_target(line: str) -> None:
    makefile = (REPO / "Makefile").read_text()
    for target in line.split()[1:]:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), line
