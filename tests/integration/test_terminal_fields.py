"""What `vpatch wheel`, `capture` and the matrix print to a person goes through the one
sanitizer (patcher/output/inert.py): an ESC or BEL in each printed field (a path, a wheel member's
name, a spec's file, an index's message, a version range) is shown escaped, never sent raw to
the terminal. Real wheels, the real CLI."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from patcher.commands import _matrixview
from patcher.wheels.matrix import Matrix, Release
from tests import envs
from tests.conftest import vpatch
from tests.support import handedits, realpkgs
from tests.support.handedits import CLICK_EDITS, CLICK_VERSION
from tests.support.specs import demo_fix
from tests.support.wheellab import fake_wheel

ESC, BEL = "\x1b", "\x07"
NASTY = f"x{ESC}]0;owned{BEL}{ESC}[31m"


def _raw(text: str) -> bool:
    return ESC in text or BEL in text


def test_wheel_prints_escaped_paths_and_file_names(tmp_path: Path) -> None:
    member = f"demo/b{BEL}.py"
    wheel = fake_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b"", member: b"X = 1\n"})
    spec = tmp_path / "demo-fix.toml"
    spec.write_text(demo_fix(member))  # the BEL written as TOML's \u0007
    out = tmp_path / f"out{NASTY}"
    out.mkdir()
    run = vpatch("wheel", spec, "--package", "demo==1.0", "--from-wheel", wheel, "-o", out)
    assert run.code == 0, run.err
    assert not _raw(run.out + run.err), repr(run.out + run.err)
    assert "demo/b\\x07.py" in run.out and "outx\\x1b]0;owned\\x07" in run.out
    assert len(list(out.glob("demo-1.0+vpatch.*.whl"))) == 1


def test_matrix_view_escapes_every_field() -> None:
    matrix = Matrix(
        f"spec{NASTY}",
        f"pkg{NASTY}",
        [Release(f"1.0{NASTY}", None, "anchor_missing", f"index said {NASTY}")],  # type: ignore[arg-type]
        versions=f">=1{NASTY}",
    )
    buf = io.StringIO()
    _matrixview.render_human(matrix, buf)
    assert not _raw(buf.getvalue()), repr(buf.getvalue())
    assert buf.getvalue().count("\\x1b") >= 5


@pytest.fixture
def click_wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    realpkgs.wheel("click", CLICK_VERSION)
    monkeypatch.setenv("VPATCH_MATRIX_WHEELS", str(envs.CACHE / "wheels"))
    monkeypatch.setenv("VPATCH_MATRIX_CACHE", str(tmp_path / "matrix"))


def test_capture_prints_escaped_paths(tmp_path: Path, click_wheels: None) -> None:
    py = realpkgs.venv(tmp_path / "edited", "click", CLICK_VERSION)
    site = next((py.parent.parent / "lib").glob("python3*/site-packages"))
    for rel, old, new, _op in CLICK_EDITS:
        handedits.edit_file(site / rel, old, new)
    out = tmp_path / f"specs{NASTY}"
    out.mkdir()
    run = vpatch(
        "capture", "click", "--id", "x", "--python", py, "--neighbours", "0", "-o", out / "x.toml"
    )
    assert run.code == 0, run.err
    assert "wrote " in run.out and "specsx\\x1b" in run.out
    assert not _raw(run.out + run.err), repr(run.out + run.err)
