"""The complexity budget (tests/complexity-budget.txt): ruff's C901 and PLR09xx findings in
patcher/ and vpatch/, by function, against the functions that were over when the rules were
turned on. pyproject.toml selects the rules with their limits; the files that hold a listed
function ignore those rules there (ruff knows files, not functions), so this is what sees a
new function over the limit in such a file, and a listed one that came under it.

A line of the budget: `PATH QUALNAME RULE=VALUE...`, e.g. `patcher/x.py Walk.step C901=14`,
the value ruff measured (complexity, branches, returns, arguments, statements)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from patcher._compat import tomllib
from tests.conftest import REPO

BUDGET = REPO / "tests" / "complexity-budget.txt"
RULES = ("C901", "PLR0911", "PLR0912", "PLR0913", "PLR0915")
WHERE = ("patcher", "vpatch")

Budget = dict[tuple[str, str], dict[str, int]]  # (path, qualname) -> rule -> value


def qualnames(path: Path) -> dict[int, str]:
    """The line of each function's `def` -> its dotted name inside the module (Class.method,
    outer.inner): what ruff's location names, kept when lines above it move."""
    out: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out[child.lineno] = name
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), str(path)), "")
    return out


def measure(root: Path = REPO) -> Budget:
    """What ruff finds over the limits now, in every file of WHERE under `root`, with the
    budget's per-file ignores taken away (the rules' limits stay pyproject's)."""
    where = [w for w in WHERE if (root / w).is_dir()]
    argv = [sys.executable, "-m", "ruff", "check", *where, "--select", ",".join(RULES)]
    argv += ["--config", "lint.per-file-ignores = {}", "--output-format", "json"]
    argv += ["--exit-zero", "--no-cache"]
    res = subprocess.run(argv, cwd=root, capture_output=True, text=True, check=True)
    found: Budget = {}
    names: dict[Path, dict[int, str]] = {}
    for d in json.loads(res.stdout):
        path = Path(d["filename"])
        if path not in names:
            names[path] = qualnames(path)
        value = re.search(r"\((\d+) > \d+\)", d["message"])
        assert value, d["message"]
        key = (path.relative_to(root).as_posix(), names[path][d["location"]["row"]])
        found.setdefault(key, {})[d["code"]] = int(value.group(1))
    return found


def parse(text: str) -> Budget:
    """The budget file's lines (blank ones and `#` comments left out)."""
    out: Budget = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].split()
        if not line:
            continue
        path, name, *values = line
        assert values and (path, name) not in out, f"{BUDGET.name}:{n}: {raw!r}"
        out[path, name] = {}
        for v in values:
            rule, _, number = v.partition("=")
            assert rule in RULES and number.isdigit(), f"{BUDGET.name}:{n}: {v!r}"
            out[path, name][rule] = int(number)
    return out


def render(budget: Budget) -> str:
    """The budget file's lines for `budget`, sorted (what a new budget file would hold)."""
    return "".join(
        f"{path} {name} " + " ".join(f"{r}={v}" for r, v in sorted(values.items())) + "\n"
        for (path, name), values in sorted(budget.items())
    )


def problems(budget: Budget, now: Budget) -> list[str]:
    """What breaks the budget: a function over a limit that is not listed for that rule, one
    that grew past its listed value, one listed that is no longer over (take its line out:
    the budget only shrinks)."""
    out = []
    for key, rules in sorted(now.items()):
        for rule, value in sorted(rules.items()):
            listed = budget.get(key, {}).get(rule)
            if listed is None:
                out.append(f"{key[0]} {key[1]}: {rule}={value} is over the limit")
            elif value > listed:
                out.append(f"{key[0]} {key[1]}: {rule}={value}, more than its budget {listed}")
    for key, rules in sorted(budget.items()):
        for rule in sorted(rules):
            if rule not in now.get(key, {}):
                out.append(f"{key[0]} {key[1]}: {rule} is within the limit now: unlist it")
    return out


def ignores(budget: Budget) -> dict[str, list[str]]:
    """The per-file ignores pyproject.toml must hold for `budget`: each listed file, the
    rules of its listed functions."""
    out: dict[str, set[str]] = {}
    for (path, _), rules in budget.items():
        out.setdefault(path, set()).update(rules)
    return {path: sorted(rules) for path, rules in sorted(out.items())}


def pyproject_ignores(text: str) -> dict[str, list[str]]:
    """The complexity rules in pyproject.toml's per-file ignores of WHERE's files."""
    table = tomllib.loads(text)["tool"]["ruff"]["lint"]["per-file-ignores"]
    return {
        path: sorted(r for r in rules if r in RULES)
        for path, rules in table.items()
        if path.startswith(tuple(f"{w}/" for w in WHERE)) and set(rules) & set(RULES)
    }
