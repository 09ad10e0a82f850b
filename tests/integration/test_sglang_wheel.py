"""The SGLang specs of tests/specs/ on the real sglang wheel: a one-line diff each.

The wheel comes from the package index through pip and is cached under $VPATCH_TEST_CACHE
(tests/envs.py); the venv holds sglang alone (`pip install --no-deps`), which is all
`--level static` needs: it reads RECORD and rewrites files, it never imports sglang.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import envs
from tests.conftest import REPO, vpatch
from tests.support.cases import changed_lines, diff_lines

pytestmark = pytest.mark.sglang
# The first releases with sglang/srt/arg_groups/ carry both guards; 0.5.23 is the one pinned.
VERSION = "0.5.23"

CASES = [
    (
        "sglang-eagle-family-kimi.toml",
        "sglang/srt/arg_groups/speculative_hook.py",
        '+        "KimiK25ForCausalLM",',
    ),
    (
        "sglang-spec-verify-fa4.toml",
        "sglang/srt/arg_groups/kv_cache_hook.py",
        '+        "fa4",',
    ),
]


@pytest.mark.parametrize(("spec", "rel", "added"), CASES, ids=[c[0] for c in CASES])
def test_one_line_diff_on_the_real_wheel(tmp_path: Path, spec: str, rel: str, added: str) -> None:
    root = envs.clone(VERSION, tmp_path / "sglang", "sglang", bare=True)
    path = envs.site_packages(root) / rel
    pristine = path.read_text()
    args = (REPO / "tests" / "specs" / spec, "--python", root / "bin" / "python")

    run = vpatch("apply", *args, "--level", "static", "--diff")
    assert run.code == 0, run.out + run.err
    assert diff_lines(run.out) == [added], run.out
    assert changed_lines(pristine, path.read_text()) == [added]

    again = vpatch("apply", *args, "--level", "static", "--diff")
    assert again.code == 0, again.out + again.err
    assert diff_lines(again.out) == [], again.out  # applied already: nothing to show
