"""The released version is the one the changelog and the pre-commit docs name: `__version__`
(what pyproject's dynamic version and `vpatch --version` take) is the newest release heading of
CHANGELOG.md, and the tag docs/hooks.md names is `v` + that version (the tag a release commit
gets once tags are published; until then the `rev:` shown is a commit). galaxy.yml and the
other places a version is shown are test_packaging.py's test_one_version_everywhere."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

import patcher

ROOT = Path(__file__).resolve().parents[2]
RELEASE = re.compile(r"^## (\d+\.\d+\.\d+) \((\d{4}-\d\d-\d\d)\)$", re.M)


def _pyproject_version() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    if "version" in project["project"]:
        return str(project["project"]["version"])
    assert "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "patcher.__version__", attr
    return patcher.__version__


def test_version_changelog_and_pre_commit_rev_agree() -> None:
    version = _pyproject_version()
    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (.+)$", changelog, re.M)
    releases = RELEASE.findall(changelog)
    assert releases, "CHANGELOG.md has no `## X.Y.Z (YYYY-MM-DD)` release heading"
    # the newest release is the first versioned heading; only `## Unreleased` may come first
    assert headings[0] in ("Unreleased", f"{releases[0][0]} ({releases[0][1]})"), headings[0]
    assert releases[0][0] == version, (releases[0], version)
    hooks = (ROOT / "docs/hooks.md").read_text()
    said = re.findall(r"tagged `v` \+ its version\s+\(`(v[\d.]+)` for\s+vpatch ([\d.]+),", hooks)
    assert said == [(f"v{version}", version)], said


def test_pre_commit_configs_pin_a_commit_while_no_tag_is_published() -> None:
    """No release tag is published yet (CHANGELOG.md says so): a config naming `rev: v0.1.0`
    stops at `git checkout v0.1.0`, so every config shown pins a commit until tags exist."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "Release tags (`vX.Y.Z`) are not published yet" in changelog
    for name in ("docs/hooks.md", ".pre-commit-hooks.yaml"):
        revs = re.findall(r"^[\s#]+rev: (\S+)", (ROOT / name).read_text(), re.M)
        assert revs and set(revs) == {"<sha>"}, (name, revs)


def test_the_check_can_fail() -> None:
    """The pattern reads a release heading and refuses an unreleased one as the newest."""
    assert RELEASE.findall("## 0.2.0 (2027-01-02)\n") == [("0.2.0", "2027-01-02")]
    assert RELEASE.findall("## Unreleased (0.2.0)\n") == []
