"""One version, one package list, one license: what pyproject.toml promises matches the tree.

The version lives only in `patcher/__init__.py` (setuptools reads it: `dynamic = ["version"]`);
every other place that shows it (the Ansible collection's galaxy.yml, wheel and tarball names
and `rev:` tags in the docs) must agree, or a user copies a command that names a release that
does not exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from patcher import __version__
from patcher._compat import tomllib
from tests.conftest import REPO, vpatch

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# Where a version is shown, in any text file of the docs: wheel and collection tarball names,
# pre-commit `rev:` tags.
SHOWN = re.compile(
    r"vpatch-(\d+\.\d+\.\d+)-py3-none-any\.whl|vpatch-core-(\d+\.\d+\.\d+)\.tar\.gz"
    r"|rev: v(\d+\.\d+\.\d+)"
)


def _texts() -> list[Path]:
    docs = [*(REPO / "docs").rglob("*.md"), REPO / "README.md", REPO / ".pre-commit-hooks.yaml"]
    return [*docs, *(REPO / "ansible_collections").rglob("*.md")]


def test_one_version_everywhere() -> None:
    assert "version" not in PYPROJECT["project"]
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "patcher.__version__"}
    galaxy = yaml.safe_load((REPO / "ansible_collections/vpatch/core/galaxy.yml").read_text())
    assert galaxy["version"] == __version__
    shown = {
        f"{path.relative_to(REPO)}: {next(v for v in m.groups() if v)}"
        for path in _texts()
        for m in SHOWN.finditer(path.read_text())
    }
    assert shown, "the docs show the version somewhere (hooks.md, scale.md)"
    assert all(s.endswith(f": {__version__}") for s in shown), sorted(shown)
    res = vpatch("--version")
    assert res.out.strip() == f"vpatch {__version__}"


def test_every_package_is_listed_and_the_catalog_mapped() -> None:
    """pyproject lists packages (a package-dir mapping rules out discovery): a new subpackage
    of patcher/ that is not listed would be missing from the wheel."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    on_disk = {
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "patcher").rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == on_disk | {"patcher.catalog_data"}
    assert setuptools["package-dir"] == {"patcher.catalog_data": "patches"}
    assert (REPO / "patcher" / "py.typed").is_file()


def test_license() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert "Apache License" in (REPO / "LICENSE").read_text()
    assert not any("License ::" in c for c in PYPROJECT["project"]["classifiers"])  # PEP 639
