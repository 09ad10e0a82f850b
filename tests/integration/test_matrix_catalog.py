"""Every spec in patches/ against every real release in its stated range (`vpatch matrix`).

This is the catalog's CI: a new vLLM release, or an upstream change that moves an anchor,
turns a row red here before a user meets it on a host. Each spec must have an expected table
below (a spec without one fails `test_every_spec_has_an_expected_table`).

Only releases whose variant edits a file cost a download (once: the target file and RECORD are
cached in $VPATCH_TEST_CACHE/matrix, the wheel deleted; wheels the suite already keeps in
$VPATCH_TEST_CACHE/wheels are reused). First run: ~2 minutes; cached: ~2 s per spec.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from packaging.version import Version

from patcher.specs.model import load_spec
from tests import envs
from tests.conftest import REPO, vpatch

pytestmark = pytest.mark.matrix

Row = tuple[int | None, str]  # (variant index, outcome)


def eagle3(v: Version) -> Row:
    """docs/matrix.md, as measured: one list up to 0.16, renamed in 0.17, upstream 0.18+."""
    if v < Version("0.17"):
        return 0, "would_apply"
    if v < Version("0.18"):
        return 1, "would_apply"
    return 2, "satisfied_upstream"


def backport(v: Version) -> Row:
    """The four files fit 0.16-0.17 with one variant; 0.18 ships the fix (docs/real-fix.md)."""
    return (0, "would_apply") if v < Version("0.18") else (1, "satisfied_upstream")


# spec id -> (--versions, releases that must be listed, expected row per release)
EXPECTED: dict[str, tuple[str, list[str], Callable[[Version], Row]]] = {
    "vllm-eagle3-mla-targets": (
        ">=0.11",
        "0.11.0 0.11.1 0.11.2 0.12.0 0.13.0 0.14.0 0.14.1 0.15.0 0.15.1 0.16.0 0.17.0 0.17.1"
        " 0.18.0 0.18.1 0.19.0 0.19.1 0.20.0 0.20.1 0.20.2 0.21.0 0.22.0".split(),
        eagle3,
    ),
    # Only the releases whose wheels the suite caches anyway are downloaded: 0.17.1 is left out
    # (its row, and the rows before 0.16, are in docs/matrix.md, from one manual run).
    "vllm-eagle3-mla-backport": (
        ">=0.16,!=0.17.1",
        "0.16.0 0.17.0 0.18.0 0.18.1 0.19.0 0.20.0 0.21.0 0.22.0".split(),
        backport,
    ),
}


def catalog() -> list[str]:
    return sorted(p.stem for p in (REPO / "patches").glob("*.toml"))


def test_every_spec_has_an_expected_table() -> None:
    assert catalog() == sorted(EXPECTED), "add the new spec's expected table to EXPECTED"


@pytest.mark.parametrize("spec_id", catalog())
def test_spec_matrix(spec_id: str) -> None:
    versions, must_list, expected = EXPECTED[spec_id]
    env = {
        "VPATCH_MATRIX_CACHE": str(envs.CACHE / "matrix"),
        "VPATCH_MATRIX_WHEELS": str(envs.CACHE / "wheels"),
    }
    spec = REPO / "patches" / f"{spec_id}.toml"
    run = vpatch("matrix", spec, "--versions", versions, "--json", env=env)
    assert run.code == 0, run.out + run.err
    doc = run.doc
    assert (doc["spec"], doc["package"]) == (spec_id, load_spec(spec).package)
    listed = [r["version"] for r in doc["releases"]]
    assert listed == sorted(listed, key=Version), "rows must be in version order"
    assert set(must_list) <= set(listed), "pip listed fewer releases than exist"
    got = {r["version"]: (r["variant"], r["outcome"]) for r in doc["releases"]}
    want = {v: expected(Version(v)) for v in listed}
    assert got == want
    for r in doc["releases"]:  # an edit row names the file and what it adds
        if r["outcome"] == "would_apply":
            assert r["message"].startswith("vllm/config/speculative.py: ")
            assert "kimi_k2" in r["message"] and "deepseek_v3" in r["message"]
            for rel, _edits in load_spec(spec).variant[r["variant"]].files():
                assert f"{rel}: " in r["message"], rel
    # The wheels are gone; the suite's own wheel cache is untouched.
    assert not list((envs.CACHE / "matrix").rglob("*.whl"))
