"""The generated reference pages (patcher.docgen) cover everything they claim to, and the docs
pages this site is built from open with the commands a user types."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from patcher import docgen, plan, result
from patcher.clidocs import subcommands
from patcher.commands import build_parser
from patcher.spec import PatchSpec

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    seen.add(model)
    for field in model.model_fields.values():
        for arg in re.findall(r"[A-Za-z]+", str(field.annotation)):
            sub = getattr(__import__("patcher.spec", fromlist=[arg]), arg, None)
            if isinstance(sub, type) and issubclass(sub, BaseModel) and sub not in seen:
                _models(sub, seen)
    return seen


def test_spec_reference_lists_every_field_of_every_model() -> None:
    text = docgen.spec_fields()
    models = _models(PatchSpec, set())
    assert len(models) >= 9  # PatchSpec, Variant, six edit ops, Probe, MetricsThresholds
    for model in models:
        for name in model.model_fields:
            assert f"| `{name}` |" in text, f"{model.__name__}.{name} missing"


def test_cli_reference_has_every_subcommand() -> None:
    """Each with what it does and an example; `%` printed as `%` (help texts are %-formatted,
    metavars are not: `N|P%%` once showed up doubled)."""
    text = docgen.cli()
    subs = subcommands(build_parser())
    assert "matrix" in subs and "apply" in subs and "completion" in subs
    for name, sub in subs.items():
        assert f"## `vpatch {name}`" in text
        assert sub.description and sub.epilog and sub.epilog.startswith("example:\n  ")
        assert f"  vpatch {name}" in sub.epilog or name == "completion", sub.epilog
        assert sub.description.split()[0][0].isupper()
    assert "%%" not in text
    assert "--batch N|P%" in text and "(or P%)" in text
    assert "  SPEC                  a spec: a .toml path, or a catalog id" in text


def test_result_and_matrix_references_cover_the_models() -> None:
    text = docgen.result_json()
    for cls in (result.RunResult, result.HostResult, result.PatchResult):
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in text
    outcomes = docgen.outcomes()
    assert all(f"`{o}`" in outcomes for o in ("applied", "drifted", "skipped"))
    assert "`not_covered` | yes" in docgen.matrix_json()
    assert set(plan.MATRIX_FAILING) <= {"anchor_missing", "ambiguous", "not_covered", "failed"}


def test_unknown_marker_is_an_error() -> None:
    assert docgen.expand("a\n<!-- vpatch:outcomes -->\nb").startswith("a\n| outcome |")
    with pytest.raises(KeyError, match="vpatch:nope"):
        docgen.expand("<!-- vpatch:nope -->")


@pytest.mark.parametrize(
    "page",
    [
        "index.md",
        "tutorial.md",
        "spec.md",
        "matrix.md",
        "design.md",
        "inventory.md",
        "reference/spec.md",
        "reference/cli.md",
        "reference/json.md",
    ],
)
def test_page_opens_with_the_commands(page: str) -> None:
    lines = (DOCS / page).read_text().splitlines()
    assert lines[0].startswith("# ")
    assert lines[1] == "" and lines[2] == "```sh", f"{page}: title, then a ```sh block"
    assert lines[3].startswith(("vpatch", "git clone")) or "vpatch" in lines[3]
