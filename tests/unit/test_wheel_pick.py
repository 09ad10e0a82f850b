"""pip's wheel choice as golden cases (tests/cases/wheels/pick.json): build tags, Requires-Python,
local versions, yanked files, sdist-only releases, platform widening, decided by
`patcher.wheels.listing.pick` (the one decision the store's ranged and whole-file paths use).
tests/integration/test_pip_choice.py holds the same rules against pip itself on real releases."""

from __future__ import annotations

import json
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from patcher.wheels import listing, remote
from tests.support.cases import CASES

_DATA = json.loads((CASES / "wheels" / "pick.json").read_text())
_CASES: list[dict[str, Any]] = _DATA["cases"]


def _files(case: dict[str, Any]) -> list[listing.File]:
    return [
        listing.File(
            f["filename"],
            f.get("url", f"http://127.0.0.1:8/f/{f['filename']}"),
            None,
            bool(f.get("yanked")),
            f.get("requires_python"),
        )
        for f in case["files"]
    ]


def _target(case: dict[str, Any]) -> tuple[tuple[int, int], list[str]]:
    major, minor = case.get("python", _DATA["default"]["python"]).split(".")
    return (int(major), int(minor)), case.get("platforms", _DATA["default"]["platforms"])


@pytest.mark.parametrize("case", _CASES, ids=[c["name"] for c in _CASES])
def test_pick_is_pips(case: dict[str, Any]) -> None:
    req = Requirement(case["pin"])
    [spec] = req.specifier
    python, platforms = _target(case)
    files = _files(case)
    got = listing.pick(
        files,
        req.name,
        Version(spec.version),
        listing.supported_tags(platforms, python),
        listing.target_python(python),
    )
    if case["expect"] is None:
        assert got.file is None
        assert case["why_none"] in got.why
        return
    assert got.file is not None and got.file.filename == case["expect"], got
    if "expect_url" in case:
        assert got.file.url == case["expect_url"]
    chosen = listing.best_wheel(files, req.name, Version(spec.version), platforms, python)
    assert chosen == got.file


def test_the_ranged_path_picks_as_the_whole_file_path() -> None:
    """`remote.choose` (HTTP ranges, this interpreter) decides with `listing.pick`: the highest
    build of equal tags, whatever the listing order (the bug: the first listed was taken)."""
    sha = "a" * 64
    got = remote.choose(
        [
            remote.Candidate("u1", "demo-1.0-1-py3-none-any.whl", sha),
            remote.Candidate("u2", "demo-1.0-3-py3-none-any.whl", sha),
            remote.Candidate("u3", "demo-1.0-2-py3-none-any.whl", sha),
            remote.Candidate("u4", "demo-1.0-9-py3-none-any.whl", sha, requires_python="<3"),
        ],
        "demo",
        Version("1.0"),
    )
    assert got is not None and got.url == "u2"


def test_pip_widens_platforms_as_pip_does() -> None:
    assert listing.pip_platforms(["manylinux2014_x86_64", "manylinux2014_x86_64"]) == [
        "manylinux2014_x86_64",
        "manylinux2010_x86_64",
        "manylinux1_x86_64",
    ]
    assert listing.pip_platforms(["manylinux2014_aarch64"]) == ["manylinux2014_aarch64"]
    assert listing.pip_platforms(["manylinux2010_i686"]) == [
        "manylinux2010_i686",
        "manylinux1_i686",
    ]
    assert listing.pip_platforms(["manylinux_2_28_x86_64"]) == ["manylinux_2_28_x86_64"]
    mac = listing.pip_platforms(["macosx_11_0_arm64"])
    assert mac[0] == "macosx_11_0_arm64" and "macosx_10_9_universal2" in mac
    assert listing.target_python((3, 11)) == Version("3.11.0")
    # iOS and Android as pip widens them (packaging's lists): older releases admitted
    assert "ios_12_0_arm64_iphoneos" in listing.pip_platforms(["ios_13_0_arm64_iphoneos"])
    assert "android_21_arm64_v8a" in listing.pip_platforms(["android_24_arm64_v8a"])
    assert listing.pip_platforms(["ios_bad"]) == ["ios_bad"]
