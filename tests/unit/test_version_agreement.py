"""The released version is said the same everywhere a user or a tool reads it: `__version__`
(what pyproject's dynamic version and `vpatch --version` take), the newest release heading of
CHANGELOG.md, the Ansible collection's galaxy.yml, and the pre-commit `rev:` docs/hooks.md tells
people to write, which must be the tag `v` + that version (the tag the lead puts on the
release commit)."""

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


def test_version_changelog_galaxy_and_pre_commit_rev_agree() -> None:
    version = _pyproject_version()
    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (.+)$", changelog, re.M)
    releases = RELEASE.findall(changelog)
    assert releases, "CHANGELOG.md has no `## X.Y.Z (YYYY-MM-DD)` release heading"
    # the newest release is the first versioned heading; only `## Unreleased` may come first
    assert headings[0] in ("Unreleased", f"{releases[0][0]} ({releases[0][1]})"), headings[0]
    assert releases[0][0] == version, (releases[0], version)
    galaxy = (ROOT / "ansible_collections/vpatch/core/galaxy.yml").read_text()
    assert re.search(rf"^version: {re.escape(version)}$", galaxy, re.M), "galaxy.yml version"
    hooks = (ROOT / "docs/hooks.md").read_text()
    revs = re.findall(r"^\s+rev: (\S+)$", hooks, re.M)
    assert revs and set(revs) == {f"v{version}"}, revs
    said = re.findall(r"tagged `v` \+ its version \(`(v[\d.]+)` for\s+vpatch ([\d.]+),", hooks)
    assert said == [(f"v{version}", version)], said


def test_the_check_can_fail() -> None:
    """The pattern reads a release heading and refuses an unreleased one as the newest."""
    assert RELEASE.findall("## 0.2.0 (2027-01-02)\n") == [("0.2.0", "2027-01-02")]
    assert RELEASE.findall("## Unreleased (0.2.0)\n") == []
