"""vpatch's own index client (issue 40 items 1-2) against a real index on 127.0.0.1
(tests/support/rangeindex.py: PEP 691 JSON or PEP 503 HTML pages with ETags, wheels with
`Range:`, every request counted), from a controller environment with no pip at all
(tests/support/nopip.py: what `uv tool install` and pipx >= 1.18 leave).

pip's configuration is the test's own (PIP_INDEX_URL at the server, PIP_CONFIG_FILE=/dev/null,
uv's off), the store and matrix cache are empty per test, and $VPATCH_PIP is unset: the
commands must work with vpatch's client alone.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import handedits, nopip, rangeindex, realpkgs, wheellab
from tests.support.handedits import CLICK_EDITS, CLICK_VERSION

CLICK_TYPES = "click/types.py"


@pytest.fixture(scope="module")
def nopip_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = nopip.make(tmp_path_factory.mktemp("nopip") / "venv")
    assert not nopip.has_pip(python), "the controller env must have no pip"
    return python


def _env(tmp: Path, index: rangeindex.Index) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VPATCH_"))}
    env.update(rangeindex.pip_env(index))
    env.update(
        {
            "UV_NO_CONFIG": "1",
            "HOME": str(tmp / "home"),
            "VPATCH_WHEEL_STORE": str(tmp / "store"),
            "VPATCH_MATRIX_CACHE": str(tmp / "matrix"),
        }
    )
    return env


def _run(python: Path, env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*nopip.vpatch_command(python), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=env["HOME"],
        timeout=600,
        check=False,
    )


def _click_env(dest: Path) -> Path:
    py = realpkgs.venv(dest, "click", CLICK_VERSION)
    for rel, old, new, _op in CLICK_EDITS:
        handedits.edit_file(realpkgs.site(py) / rel, old, new)
    return py


def test_every_authoring_command_works_without_pip(nopip_python: Path, tmp_path: Path) -> None:
    """diff, capture (with its matrix of neighbours), matrix, backport and wheel, run by an
    interpreter that cannot import pip, against the local index: all succeed; the whole wheel
    `vpatch wheel` needs comes through vpatch's client (hash-checked), not pip."""
    (tmp_path / "home").mkdir()
    py = _click_env(tmp_path / "edited")
    wheel = realpkgs.wheel("click", CLICK_VERSION)
    spec = tmp_path / "click.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    with rangeindex.serve([wheel]) as index:
        env = _env(tmp_path, index)
        diff = _run(nopip_python, env, "diff", "click", "--python", py, "--json")
        assert diff.returncode == 0, diff.stderr
        files = {f["file"]: f for f in json.loads(diff.stdout)["groups"][0]["files"]}
        assert files[CLICK_TYPES]["pristine"] == "wheel"
        assert '+    name = "bool"' in files[CLICK_TYPES]["diff"]
        out = tmp_path / "c.toml"
        cap = _run(nopip_python, env, "capture", "click", "--id", "c", "--python", py, "-o", out)
        assert cap.returncode == 0 and out.exists(), cap.stderr
        assert "matrix skipped" not in cap.stdout + cap.stderr
        mat = _run(nopip_python, env, "matrix", spec, "--json")
        assert mat.returncode == 0, mat.stderr
        assert [r["version"] for r in json.loads(mat.stdout)["releases"]] == [CLICK_VERSION]
        patch = tmp_path / "fix.diff"
        patch.write_text(files[CLICK_TYPES]["diff"])
        back = _run(
            nopip_python, env, "backport", patch, "--package", "click",
            "--from-version", CLICK_VERSION, "--id", "b", "-o", tmp_path / "b.toml",
            "--no-matrix", "--json",
        )  # fmt: skip
        assert back.returncode == 0, back.stderr
        built = _run(
            nopip_python, env, "wheel", spec, "--package", f"click=={CLICK_VERSION}",
            "-o", tmp_path / "dist", "--json",
        )  # fmt: skip
        assert built.returncode == 0, built.stderr
        whole = [r for r in index.requests if r.startswith("GET /files/") and "bytes=" not in r]
    assert Path(json.loads(built.stdout)["wheel"]).exists()
    assert len(whole) == 1, index.requests  # the wheel command's: once, by vpatch's client
    assert len(list((tmp_path / "store" / "blobs").glob("*.whl"))) == 1


def test_a_warm_run_asks_nothing_refresh_asks_again(nopip_python: Path, tmp_path: Path) -> None:
    """The project page is kept with its ETag: a second matrix asks the index nothing at all
    (the page is fresh, the release's file is in the matrix cache); --refresh reads the page
    again, whole."""
    (tmp_path / "home").mkdir()
    spec = tmp_path / "click.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    with rangeindex.serve([realpkgs.wheel("click", CLICK_VERSION)]) as index:
        env = _env(tmp_path, index)
        cold = _run(nopip_python, env, "matrix", spec, "--json")
        assert cold.returncode == 0, cold.stderr
        assert index.requests[0] == "GET /simple/click/", index.requests
        index.reset()
        warm = _run(nopip_python, env, "matrix", spec, "--json")
        assert warm.returncode == 0, warm.stderr
        assert index.requests == [] and index.sent == 0, index.requests
        assert json.loads(warm.stdout) == json.loads(cold.stdout)
        refreshed = _run(nopip_python, env, "matrix", spec, "--json", "--refresh")
        assert refreshed.returncode == 0, refreshed.stderr
        assert index.requests == ["GET /simple/click/"] and index.not_modified == []


def test_a_stale_page_costs_one_conditional_request(nopip_python: Path, tmp_path: Path) -> None:
    """A page its server says not to reuse (max-age=0) is asked for again with its ETag: one
    request per index, answered 304 with no body, and the run is the same."""
    (tmp_path / "home").mkdir()
    spec = tmp_path / "click.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    wheel = realpkgs.wheel("click", CLICK_VERSION)
    with rangeindex.serve([wheel], cache_control="max-age=0") as index:
        env = _env(tmp_path, index)
        cold = _run(nopip_python, env, "matrix", spec, "--json")
        assert cold.returncode == 0, cold.stderr
        index.reset()
        again = _run(nopip_python, env, "matrix", spec, "--json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout) == json.loads(cold.stdout)
        assert index.requests == ["GET /simple/click/"], index.requests
        assert index.not_modified == ["/simple/click/"] and index.sent == 0


def test_no_index_reachable_says_what_to_do(nopip_python: Path, tmp_path: Path) -> None:
    """No pip and nothing listening: one error line and a hint that names the settings (not
    `python -m pip`, which is not there)."""
    (tmp_path / "home").mkdir()
    spec = tmp_path / "click.toml"
    spec.write_text(wheellab.CLICK_SPEC)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VPATCH_"))}
    env.update(wheellab.offline_env())
    env.update({"UV_NO_CONFIG": "1", "HOME": str(tmp_path / "home")})
    env["VPATCH_WHEEL_STORE"] = str(tmp_path / "store")
    env["VPATCH_MATRIX_CACHE"] = str(tmp_path / "matrix")
    run = _run(nopip_python, env, "matrix", spec)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and lines[-1].startswith("hint: "), run.stderr
    assert "PIP_INDEX_URL" in run.stderr and "--wheelhouse" in run.stderr
    assert "No module named pip" not in run.stderr and "Traceback" not in run.stderr
