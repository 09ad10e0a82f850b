"""The controller on the oldest and newest Pythons it supports, installed the way users do:
`pip install` of vpatch's wheel into a fresh venv, then the shipped catalog used from `/` (no
./patches there, no $VPATCH_CATALOG), against a target env holding a stand-in `vllm` whose file
has the anchor of the catalog spec. The wheel is built once from a copy of the sources (pip
builds in the tree it is given, and the repo is not its to write); pip's cache keeps the
dependency downloads to the first run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from patcher import __version__
from tests import jsondoc, pythons, scale, standin
from tests.conftest import REPO

SPEC_ID = "vllm-eagle3-mla-targets"
# The shape of vLLM 0.16's file around the list the catalog spec edits (variant 0).
SPECULATIVE = """
class SpeculativeConfig:
    def _verify_args(self):
        eagle3_target_supported = ["llama", "qwen", "minicpm", "gpt_oss"]
        model_type = self.target_model_config.hf_text_config.model_type
        if self.method == "eagle3" and not any(s in model_type for s in eagle3_target_supported):
            raise ValueError(f"eagle3 is only supported for {eagle3_target_supported}")
"""
VLLM = {
    "vllm/__init__.py": '__version__ = "0.16.0"\n',
    "vllm/config/__init__.py": "",
    "vllm/config/speculative.py": SPECULATIVE,
}
SOURCES = [
    "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "man", "patcher", "patches", "vpatch"
]  # fmt: skip
MAN = f"vpatch-{__version__}.data/data/share/man/man1/vpatch.1"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(REPO / name, src / name, ignore=ignore)
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "-q", "wheel", "--no-deps", "-w", str(work), str(src)]
    subprocess.run(pip, check=True, capture_output=True)
    [whl] = work.glob("vpatch-*.whl")
    return whl


def test_wheel_ships_the_catalog_license_and_types(wheel: Path) -> None:
    assert wheel.name == f"vpatch-{__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    catalog = sorted((REPO / "patches").glob("*.toml"))
    assert catalog
    for spec in catalog:
        shipped = f"patcher/catalog_data/{spec.name}"
        assert shipped in names, sorted(names)
        assert zipfile.ZipFile(wheel).read(shipped) == spec.read_bytes()
    assert "patcher/py.typed" in names
    # vpatch(1) lands in the venv's share/man/man1, where `man vpatch` looks beside bin/
    assert zipfile.ZipFile(wheel).read(MAN) == (REPO / "man" / "vpatch.1").read_bytes()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)
    meta = zipfile.ZipFile(wheel).read(f"vpatch-{__version__}.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in meta and "Requires-Python: >=3.10" in meta


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """The env vpatch patches: the hosts' interpreter with the stand-in vllm 0.16.0."""
    d = tmp_path / "target"
    d.mkdir()
    venv = d / "venv"
    standin.install_venv(venv, standin.package_wheel(d, "vllm", "0.16.0", VLLM))
    return venv / "bin" / "python"


@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_controller_runs_on(version: str, wheel: Path, target: Path, tmp_path: Path) -> None:
    python = pythons.find(version)
    started = time.monotonic()
    venv = tmp_path / f"vpatch-{version}"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "-q", "--python", str(venv / "bin" / "python")]
    subprocess.run([*pip, "install", str(wheel)], check=True, capture_output=True)
    installed = time.monotonic() - started
    env = {k: v for k, v in os.environ.items() if k != "VPATCH_CATALOG"}

    def vpatch(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(venv / "bin" / "vpatch"), *args]
        return subprocess.run(argv, cwd="/", env=env, capture_output=True, text=True, timeout=120)

    listed = vpatch("catalog", "--json")
    assert listed.returncode == 0, listed.stderr
    [entry] = [e for e in jsondoc.check(json.loads(listed.stdout))["specs"] if e["id"] == SPEC_ID]
    assert entry["source"] == "shipped"
    assert Path(entry["path"]).read_bytes() == (REPO / "patches" / f"{SPEC_ID}.toml").read_bytes()
    assert f"/python{version}/site-packages/patcher/catalog_data/" in entry["path"]

    static = ["--python", str(target), "--level", "static", "--json"]
    before = vpatch("verify", SPEC_ID, *static)
    assert before.returncode == 1, before.stderr
    assert jsondoc.check(json.loads(before.stdout))["hosts"][0]["patches"][0]["outcome"] == (
        "not_applied"
    )
    applied = vpatch("apply", SPEC_ID, *static)
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["hosts"][0]["patches"][0]["outcome"] == "applied"
    after = vpatch("verify", SPEC_ID, *static)
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["hosts"][0]["patches"][0]["outcome"] == "applied"
    back = vpatch("rollback", "--python", str(target), "--json")
    assert back.returncode == 0, back.stderr
    version_line = vpatch("--version").stdout.strip()
    assert version_line == f"vpatch {__version__}"
    # `man vpatch` finds the installed page through PATH (man-db looks beside each bin/)
    found = subprocess.run(
        ["man", "-w", "vpatch"],
        env={k: v for k, v in env.items() if k != "MANPATH"} | {"PATH": f"{venv}/bin:/usr/bin"},
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == str(venv / "share/man/man1/vpatch.1"), found.stderr
    took = time.monotonic() - started
    print(f"python {version}: venv + pip install {installed:.1f}s, total {took:.1f}s")
    assert took < 60, f"{took:.0f}s: the install should come from pip's cache"
    _what_a_new_user_runs(venv, env, tmp_path)


@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_uv_tool_install(version: str, wheel: Path, target: Path, tmp_path: Path) -> None:
    """`uv tool install` of the built wheel (the documented install next to pipx) on the oldest
    and newest Python, offline from the dependencies pip fetched through its own configuration:
    the tool's `vpatch` lists the shipped catalog and patches, checks and rolls back."""
    python = pythons.find(version)
    deps = tmp_path / "deps"
    # that Python's own pip: its markers (libcst needs pyyaml-ft on 3.13 only) are its own
    fetch = [python, "-m", "pip", "-q", "download", "--dest", str(deps), str(wheel)]
    got = subprocess.run(fetch, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-2000:]
    uv = str(Path(sys.executable).with_name("uv"))
    env = {k: v for k, v in os.environ.items() if k != "VPATCH_CATALOG"}
    env |= {
        "UV_TOOL_DIR": str(tmp_path / "tools"),
        "UV_TOOL_BIN_DIR": str(tmp_path / "bin"),
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "UV_PYTHON_DOWNLOADS": "never",
    }
    install = [uv, "tool", "install", "--offline", "--no-index", "--find-links", str(deps),
               "--python", python, str(wheel)]  # fmt: skip
    done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]

    def vpatch(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(tmp_path / "bin" / "vpatch"), *args]
        return subprocess.run(argv, cwd="/", env=env, capture_output=True, text=True, timeout=120)

    assert vpatch("--version").stdout.strip() == f"vpatch {__version__}"
    listed = vpatch("catalog", "--json")
    assert listed.returncode == 0, listed.stderr
    [entry] = [e for e in jsondoc.check(json.loads(listed.stdout))["specs"] if e["id"] == SPEC_ID]
    assert entry["source"] == "shipped" and f"/python{version}/" in entry["path"], entry
    static = ["--python", str(target), "--level", "static", "--json"]
    outcomes = []
    for command in ("verify", "apply", "verify"):
        res = vpatch(command, SPEC_ID, *static)
        outcomes.append(
            (res.returncode, json.loads(res.stdout)["hosts"][0]["patches"][0]["outcome"])
        )
    assert outcomes == [(1, "not_applied"), (0, "applied"), (0, "applied")], outcomes
    assert vpatch("rollback", "--python", str(target), "--json").returncode == 0
    assert vpatch("verify", SPEC_ID, *static).returncode == 1
    # the paramiko extra is added by reinstalling from the source the receipt names
    asked = vpatch("status", "--host", "127.0.0.1:9", "--ssh-client", "paramiko")
    assert asked.returncode == 2, asked.stderr
    said = f"environment: uv tool install --with fabric {wheel}\n"
    assert said in asked.stderr and "vpatch[" not in asked.stderr, asked.stderr


# Every module of both packages, imported in the installed wheel's own interpreter: a
# dependency imported but not declared (PyYAML on 3.13, where libcst brings pyyaml-ft) fails.
IMPORT_ALL = """
import importlib, pkgutil, patcher, vpatch
walk = pkgutil.walk_packages
names = [m.name for p in (patcher, vpatch) for m in walk(p.__path__, p.__name__ + ".")]
for name in names:
    if name != "vpatch.__main__":
        importlib.import_module(name)
print(len(names))
"""


def _what_a_new_user_runs(venv: Path, env: dict[str, str], tmp_path: Path) -> None:
    python = str(venv / "bin" / "python")
    env = {**env, "PATH": f"{venv / 'bin'}:/usr/bin:/bin"}  # no ansible-inventory there

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd="/", env=env, capture_output=True, text=True, timeout=120)

    imported = run(python, "-c", IMPORT_ALL)
    assert imported.returncode == 0 and int(imported.stdout) > 50, imported.stderr
    assert run(python, "-m", "vpatch", "--version").stdout.strip() == f"vpatch {__version__}"
    usage = run(python, "-m", "vpatch", "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("usage: vpatch "), usage.stdout
    # OpenSSH is the default client: fabric/paramiko are the `paramiko` extra, not installed.
    assert run(python, "-c", "import fabric").returncode == 1
    asked = run(
        str(venv / "bin" / "vpatch"), "status", "--host", "127.0.0.1:9", "--ssh-client", "paramiko"
    )
    # the hint adds fabric to this venv, which has no pip (never `vpatch[paramiko]`: no index
    # has a vpatch distribution)
    assert asked.returncode == 2, asked.stderr
    assert f"pip --python {venv / 'bin'}/python" in asked.stderr, asked.stderr
    assert " install fabric" in asked.stderr and "vpatch[" not in asked.stderr, asked.stderr
    assert "Traceback" not in asked.stderr
    # A YAML inventory read by the built-in reader (PyYAML, declared), group_vars included: a
    # template there is refused by name, before any host is contacted.
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    gpu-01:\n      ansible_host: 127.0.0.1\n")
    (inv / "group_vars" / "all.yml").write_text("ansible_python_interpreter: '{{ venv }}/python'\n")
    read = run(str(venv / "bin" / "vpatch"), "status", "--inventory", str(inv / "hosts.yml"))
    assert read.returncode == 2, read.stderr
    assert "ansible_python_interpreter is a template" in read.stderr, read.stderr
    assert "Traceback" not in read.stderr


def test_sdist_carries_tests_and_docs_and_passes_twine(tmp_path: Path) -> None:
    """`python -m build` from a copy of the tree (what git tracks, and new files it does not
    ignore): the sdist holds what a packager needs to rebuild and test, the wheel is built FROM
    that sdist, and `twine check --strict` accepts both (metadata, README rendering)."""
    tools = scale.engine_venv("build-twine-venv", ["build", "twine"], vpatch_deps=False) / "bin"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    src = tmp_path / "src"
    for rel in filter(None, listed.stdout.decode().split("\0")):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    dist = tmp_path / "dist"
    built = subprocess.run(
        [str(tools / "python"), "-m", "build", "--outdir", str(dist), str(src)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [sdist] = dist.glob("vpatch-*.tar.gz")
    [whl] = dist.glob("vpatch-*.whl")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for wanted in (
        "tests/unit/test_packaging.py",
        "tests/cases",
        "docs/index.md",
        "docs/_hooks.py",
        "mkdocs.yml",
        "Makefile",
        "CHANGELOG.md",
        "ansible_collections/vpatch/core/galaxy.yml",
        "patches/vllm-eagle3-mla-targets.toml",
        "vpatch/__main__.py",
    ):
        assert wanted in names, wanted
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    wheel_names = set(zipfile.ZipFile(whl).namelist())
    assert {
        "vpatch/__main__.py",
        "patcher/catalog_data/vllm-eagle3-mla-targets.toml",
        MAN,  # the man page, from the sdist too
    } <= wheel_names
    assert not [n for n in wheel_names if n.startswith("tests/")]
    twine = subprocess.run(
        [str(tools / "twine"), "check", "--strict", str(sdist), str(whl)],
        capture_output=True,
        text=True,
    )
    assert twine.returncode == 0, twine.stdout + twine.stderr
    meta = zipfile.ZipFile(whl).read(f"vpatch-{__version__}.dist-info/METADATA").decode()
    assert "Provides-Extra: paramiko" in meta and "Requires-Dist: PyYAML" in meta
    assert "Project-URL" not in meta  # none invented (pyproject.toml says why)
