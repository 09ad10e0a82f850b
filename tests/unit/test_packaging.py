"""One version, one package list, one license: what pyproject.toml promises matches the tree.

The version lives only in `patcher/__init__.py` (setuptools reads it: `dynamic = ["version"]`);
every other place that shows it (the Ansible collection's galaxy.yml, wheel and tarball names
and `rev:` tags in the docs) must agree, or a user copies a command that names a release that
does not exist.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml
from packaging.requirements import Requirement

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
        ".".join(p.parent.relative_to(REPO).parts)
        for top in ("patcher", "vpatch")
        for p in (REPO / top).rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == on_disk | {"patcher.catalog_data"}
    assert (REPO / "vpatch" / "__main__.py").is_file()  # python -m vpatch
    assert setuptools["package-dir"] == {"patcher.catalog_data": "patches"}
    assert (REPO / "patcher" / "py.typed").is_file()


def test_license() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert "Apache License" in (REPO / "LICENSE").read_text()
    assert not any("License ::" in c for c in PYPROJECT["project"]["classifiers"])  # PEP 639


# Import name -> the distribution that provides it: every third-party import of the shipped
# packages must be here, and its distribution declared (a dependency, or an extra for a module
# that imports it only where that feature is asked for).
PROVIDERS = {
    "libcst": "libcst",
    "packaging": "packaging",
    "prometheus_client": "prometheus_client",
    "pydantic": "pydantic",
    "rich": "rich",
    "shtab": "shtab",
    "yaml": "PyYAML",
    "tomli": "tomli",
    "fabric": "fabric",
    "paramiko": "fabric",  # paramiko and invoke come with fabric
    "invoke": "fabric",
    "ray": "ray",
}
OPTIONAL = {"fabric": "paramiko", "ray": "ray"}  # distribution -> the extra that brings it


def _imports(top: str) -> set[str]:
    """Top-level names every module of `top` imports, at any depth (lazy imports too)."""
    found: set[str] = set()
    for path in (REPO / top).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    private = {n for n in found if n.startswith("_")}  # the stdlib's C modules (_sha2: 3.12+)
    return found - set(sys.stdlib_module_names) - private - {"patcher", "vpatch"}


def test_every_import_is_declared() -> None:
    """The Python 3.13 crash: `yaml` was imported but never declared (libcst brings PyYAML on
    3.10-3.12 and pyyaml-ft, module `yaml_ft`, on 3.13+)."""
    third_party = _imports("patcher") | _imports("vpatch")
    assert third_party <= set(PROVIDERS), sorted(third_party - set(PROVIDERS))
    project = PYPROJECT["project"]
    declared = {Requirement(r).name.lower() for r in project["dependencies"]}
    extras = {
        extra: {Requirement(r).name.lower() for r in reqs}
        for extra, reqs in project["optional-dependencies"].items()
    }
    for module in third_party:
        dist = PROVIDERS[module].lower()
        if dist in OPTIONAL:
            assert dist not in declared, f"{dist} is optional: the {OPTIONAL[dist]} extra"
            assert dist in extras[OPTIONAL[dist]], (module, dist)
        else:
            assert dist in declared, f"{module} is imported: declare {PROVIDERS[module]}"


def test_metadata_is_publishable() -> None:
    """PyPI takes only absolute http(s) URLs; there is no public home yet, so none is made up."""
    for name, url in PYPROJECT["project"].get("urls", {}).items():
        assert re.match(r"^https://[^/\s]+\.[^/\s]+/", url), (name, url)
    manifest = (REPO / "MANIFEST.in").read_text()
    for tree in ("tests", "docs", "patches", "ansible_collections"):
        assert f"graft {tree}\n" in manifest, tree
    readme, index = (REPO / "README.md").read_text(), (REPO / "docs/index.md").read_text()
    wanted = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    for text in (readme, index):
        assert re.findall(r"Python (3\.\d+)\+", text)[0] == wanted
        assert "pipx install" in text and "uv tool install" in text
