"""Issue 25 case 11, `vpatch diff` on real click 8.1.7 wheels: a file over the scan's size limit
is named as not checked (never counted as pip's), and after `apply --force` on a hand-edited
file the diff is taken against pip's bytes (the wheel's), so the hand edit the forced base
holds stays visible. Pristine bytes come from the cached test wheels (VPATCH_MATRIX_WHEELS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import envs
from tests.conftest import vpatch
from tests.support import handedits, realpkgs
from tests.support.handedits import CLICK_EDITS, CLICK_VERSION
from tests.support.wheellab import CLICK_SPEC as SPEC


@pytest.fixture(autouse=True)
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    realpkgs.wheel("click", CLICK_VERSION)
    monkeypatch.setenv("VPATCH_MATRIX_WHEELS", str(envs.CACHE / "wheels"))
    monkeypatch.setenv("VPATCH_MATRIX_CACHE", str(tmp_path / "matrix"))


def _site(python: Path) -> Path:
    return next((python.parent.parent / "lib").glob("python3*/site-packages"))


def test_files_over_the_limit_are_named_not_checked(tmp_path: Path) -> None:
    py = realpkgs.venv(tmp_path / "env", "click", CLICK_VERSION)
    big = _site(py) / "click" / "_speedups.so"
    with open(big, "wb") as fh:
        fh.truncate(17 << 20)  # over the scan's 16 MiB: never hashed
    res = vpatch("diff", "click", "--python", py)
    assert res.code == 0, res.err
    assert "every file is pip's" not in res.out
    assert "every file checked is pip's" in res.out
    why = "larger than the scan's limit or not a plain file"
    assert f"NOT checked ({why}): 1 file(s): click/_speedups.so" in res.out
    doc = vpatch("diff", "click", "--python", py, "--json").doc
    assert doc["groups"][0]["skipped"] == ["click/_speedups.so"]


def test_diff_after_force_is_against_pips_bytes(tmp_path: Path) -> None:
    py = realpkgs.venv(tmp_path / "env", "click", CLICK_VERSION)
    rel, old, new, _ = CLICK_EDITS[1]  # a hand edit elsewhere in the file the spec edits
    handedits.edit_file(_site(py) / rel, old, new)
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    forced = vpatch("apply", spec, "--python", py, "--force", "--level", "static")
    assert forced.code == 0, forced.out + forced.err
    res = vpatch("diff", "click", "--python", py, "--json")
    [f] = res.doc["groups"][0]["files"]
    assert f["pristine"] == "wheel"
    assert '-    name = "boolean"' in f["diff"] and '+    name = "bool"' in f["diff"]
    assert '"enabled"' in f["diff"]  # the hand edit the forced base holds: not hidden
