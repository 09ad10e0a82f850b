"""`vpatch matrix --platform X` names the releases that have no wheel for X (human output and
--json) instead of leaving them out in silence; vpatch's own index client over an index on
disk (the user's pip configuration switched off)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import vpatch
from tests.support import tagindex
from tests.support.specs import edit, spec_toml

PKG = "vpatch-tags"
MOD = "vpatch_tags/mod.py"
RELEASES = {
    "1.0": ["py3-none-any"],
    "1.1": ["cp311-cp311-win_amd64", "sdist"],  # a wheel for another platform only
    "1.2": ["sdist"],  # no wheel at all
    "1.3": ["cp311-cp311-manylinux1_x86_64"],  # manylinux2014 admits manylinux1 (pip)
    # both names of one platform: manylinux2014 admits it, manylinux_2_28 does not (pip does
    # not widen a PEP 600 platform)
    "1.4": ["cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64"],
}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    simple = tagindex.index(tmp_path / "index", PKG, RELEASES, {MOD: 'SUPPORTED = ["a"]\n'})
    out = {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": simple.as_uri(),
        "PIP_FIND_LINKS": "",
        "PIP_EXTRA_INDEX_URL": "",
        "VPATCH_MATRIX_CACHE": str(tmp_path / "cache"),
        "VPATCH_MATRIX_WHEELS": "",
        "VPATCH_WHEEL_STORE": str(tmp_path / "store"),
        "VPATCH_WHEELHOUSE": "",
        "VPATCH_PIP": "",
    }
    for k, v in out.items():
        monkeypatch.setenv(k, v)
    return out


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "tags.toml"
    path.write_text(
        spec_toml(
            id="tags-b",
            package=PKG,
            versions=">=1.0",
            file=MOD,
            edits=[edit("ensure_elements", target="SUPPORTED", values=["b"])],
        )
    )
    return path


def test_releases_without_a_wheel_for_the_platform_are_named(
    env: dict[str, str], spec: Path
) -> None:
    args = ("matrix", spec, "--platform", "manylinux2014_x86_64")
    human = vpatch(*args, env=env)
    assert human.code == 0, human.out + human.err
    rows = [ln.split()[0] for ln in human.out.splitlines()[2:] if ln[:2] == "1."]
    assert rows == ["1.0", "1.3", "1.4"]
    assert "2 releases have no wheel for manylinux2014_x86_64 (not examined): 1.1, 1.2" in human.out
    doc = vpatch(*args, "--json", env=env).doc
    assert [r["version"] for r in doc["releases"]] == ["1.0", "1.3", "1.4"]
    assert doc["platforms"] == ["manylinux2014_x86_64"] and doc["no_wheel"] == ["1.1", "1.2"]
    # a PEP 600 platform is itself only, as pip takes it: 1.3 and 1.4 have none for it
    strict = vpatch("matrix", spec, "--platform", "manylinux_2_28_x86_64", "--json", env=env)
    assert [r["version"] for r in strict.doc["releases"]] == ["1.0"]
    assert strict.doc["no_wheel"] == ["1.1", "1.2", "1.3", "1.4"]
    # without --platform nothing is left out, and the document says so
    plain = vpatch("matrix", spec, "--json", env=env).doc
    assert plain["platforms"] == [] and plain["no_wheel"] == []


def test_no_release_in_range_with_a_wheel_is_exit_2(env: dict[str, str], spec: Path) -> None:
    run = vpatch("matrix", spec, "--platform", "win_arm64", "--versions", ">=1.1,<1.3", env=env)
    assert run.code == 2, run.out + run.err
    assert "has a wheel for win_arm64 (2 without one: 1.1, 1.2)" in run.err
    assert "Traceback" not in run.err
