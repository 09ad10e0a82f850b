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
import time
import zipfile
from pathlib import Path

import pytest

from patcher import __version__
from tests import jsondoc, pythons, standin
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
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "patcher", "patches"]


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
    took = time.monotonic() - started
    print(f"python {version}: venv + pip install {installed:.1f}s, total {took:.1f}s")
    assert took < 60, f"{took:.0f}s: the install should come from pip's cache"
