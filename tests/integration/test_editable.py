"""Issue 25 case 12: an editable install (`pip install -e SRC`, common for vLLM built from
source) is refused with exit 2 and an `error:`/`hint:` naming the source tree, by apply,
ensure, exec, status and diff alike: its code is SRC's files, which pip's RECORD does not list,
so "does not exist" (apply) and "every file is pip's" (diff) were both false. Nothing is
written. The install is made by real pip from a real source tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import envs, standin
from tests.conftest import fingerprint, vpatch
from tests.support.standin_specs import SPEC_A

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
[project]
name = "servekit"
version = "1.0.0"
[tool.setuptools]
packages = ["servekit"]
"""


def test_editable_install_is_refused_everywhere(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "servekit").mkdir(parents=True)
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "servekit" / "__init__.py").write_text("")
    (src / "servekit" / "config.py").write_text(standin.CONFIG_PY)
    venv = tmp_path / "venv"
    subprocess.run([envs.HOST_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "-q", "--python", str(python), "install", "-e", str(src)]
    subprocess.run(pip, check=True, capture_output=True)
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    py = ["--python", str(python)]
    snap = fingerprint(tmp_path)

    where = f"servekit is an editable install (pip install -e file://{src})"
    for argv in (["apply", spec], ["ensure", spec], ["status", spec], ["verify", spec]):
        res = vpatch(*argv, *py)
        assert res.code == 2, (argv, res.out, res.err)
        assert (
            f"error: local: {where}" in res.err and "hint: install servekit from a wheel" in res.err
        )
    as_json = vpatch("apply", spec, *py, "--json")
    assert as_json.code == 2 and where in as_json.doc["hosts"][0]["error"]
    diff = vpatch("diff", "servekit", *py)
    assert diff.code == 2 and where in diff.err and "every file is pip's" not in diff.out
    started = tmp_path / "started"
    ex = vpatch("exec", spec, *py, "--", "touch", started)
    assert ex.code == 2 and not started.exists() and where in ex.err
    assert fingerprint(tmp_path) == snap  # nothing written: no state dir, source untouched
