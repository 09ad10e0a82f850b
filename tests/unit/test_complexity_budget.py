"""The complexity budget only shrinks (tests/support/budget.py says how it is kept): ruff's
C901 and PLR09xx are on in pyproject.toml, and the functions that were over their limits when
they were turned on are listed by name with the value ruff measured. A new function over a
limit, a listed one that grew, or a listed one now within the limit and still listed fails
here; so does a per-file ignore in pyproject.toml that the budget does not account for."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO
from tests.support import budget


def test_the_budget_only_shrinks() -> None:
    listed = budget.parse(budget.BUDGET.read_text())
    assert budget.problems(listed, budget.measure()) == []


def test_pyproject_ignores_exactly_the_budgets_files() -> None:
    """ruff ignores a rule per file: each file of the budget for its functions' rules, and
    no other file of patcher/ or vpatch/ (a file whose last listed function came within the
    limit must be checked by ruff again)."""
    listed = budget.parse(budget.BUDGET.read_text())
    got = budget.pyproject_ignores((REPO / "pyproject.toml").read_text())
    assert got == budget.ignores(listed)


def test_the_budget_can_fail(tmp_path: Path) -> None:
    """A module with one function over C901's limit and one over PLR0913's, measured by ruff
    with the repository's limits: unlisted it fails, listed it passes, grown it fails, and a
    listing left behind after the function was simplified fails."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (tmp_path / "patcher").mkdir()
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(11))
    (tmp_path / "patcher" / "m.py").write_text(
        f"class K:\n    def tangled(self, x: int) -> int:\n{branches.replace('    ', '        ')}"
        "        return -1\n\n\n"
        "def wide(a: int, b: int, c: int, d: int, e: int, f: int) -> int:\n"
        "    return a + b + c + d + e + f\n"
    )
    now = budget.measure(tmp_path)
    assert now == {
        ("patcher/m.py", "K.tangled"): {"C901": 12, "PLR0911": 12},
        ("patcher/m.py", "wide"): {"PLR0913": 6},
    }
    assert len(budget.problems({}, now)) == 3
    assert budget.problems(budget.parse(budget.render(now)), now) == []
    grown = {**now, ("patcher/m.py", "wide"): {"PLR0913": 7}}
    assert budget.problems(now, grown) == ["patcher/m.py wide: PLR0913=7, more than its budget 6"]
    stale = {**now, ("patcher/m.py", "gone"): {"C901": 11}}
    assert budget.problems(stale, now) == [
        "patcher/m.py gone: C901 is within the limit now: unlist it"
    ]
    assert budget.ignores(now) == {"patcher/m.py": ["C901", "PLR0911", "PLR0913"]}
