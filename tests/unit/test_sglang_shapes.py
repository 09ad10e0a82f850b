"""The SGLang specs in tests/specs/ on files shaped like SGLang's guards (written here, not
copied): a short spec gives a one-line diff, and the golden case pins exactly that edit.

The same specs run on the real wheel in tests/integration/test_sglang_wheel.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patcher.rewrite import apply_edits
from patcher.specs.model import load_spec
from tests.support.cases import CASES, changed_lines, load_case

SPECS = Path(__file__).resolve().parent.parent / "specs"

# spec file -> (golden case, the one line the diff adds)
SHAPES = {
    "sglang-eagle-family-kimi.toml": (
        "ensure_elements/sglang_eagle_family_guard.py",
        '+        "KimiK25ForCausalLM",',
    ),
    "sglang-spec-verify-fa4.toml": (
        "ensure_elements/sglang_frozenset_target.py",
        '+        "fa4",',
    ),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_short_spec_one_line_diff(name: str) -> None:
    path = SPECS / name
    assert len(path.read_text().splitlines()) <= 15
    spec = load_spec(path)
    [variant] = spec.variant
    case_path, added = SHAPES[name]
    case = load_case(CASES / case_path)
    assert list(variant.edit) == [case.edit]  # the golden case pins this spec's edit
    result = apply_edits(case.source, variant.edit)
    assert result.status == "changed", result.message
    assert result.source == case.expected
    assert changed_lines(case.source, result.source) == [added]
    again = apply_edits(result.source, variant.edit)
    assert (again.status, again.source) == ("unchanged", result.source)
