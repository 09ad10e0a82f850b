"""`vpatch backport` of a real upstream fix: requests 2.32.0 made `super_len` count a str's
UTF-8 bytes (one hunk in requests/utils.py). The diff is taken from the two real wheels, cut
to that hunk, back-ported onto 2.31.0 and applied there and on one more release (2.30.0),
the file afterwards holding 2.32.0's code for that function."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import vpatch
from tests.support import realpkgs, upstream

REL = "requests/utils.py"


def _text(version: str) -> str:
    return upstream.wheel_text("requests", version, REL)


def _one_hunk(old: str, new: str, marker: str) -> str:
    """The unified diff old -> new, with only the hunk whose added lines hold `marker`."""
    text, left = upstream.cut(REL, old, new, lambda h: any(
        ln.startswith("+") and marker in ln for ln in h[1:]
    ))  # fmt: skip
    assert text.count("\n@@ ") == 1, left
    return text


def _function(source: str, name: str) -> str:
    tree = ast.parse(source)
    [fn] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    return ast.dump(fn)


def test_upstream_hunk_backported_onto_two_older_releases(tmp_path: Path) -> None:
    old, new = _text("2.31.0"), _text("2.32.0")
    assert _function(old, "super_len") != _function(new, "super_len")
    diff = tmp_path / "super-len.diff"
    diff.write_text(_one_hunk(old, new, 'o.encode("utf-8")'))
    spec = tmp_path / "requests-super-len.toml"
    res = vpatch(
        "backport", diff, "--package", "requests", "--from-version", "2.31.0",
        "--id", "requests-super-len", "-o", spec, "--versions", ">=2.30,<2.32",
        "--no-matrix", "--json",
    )  # fmt: skip
    assert res.code == 0, res.err
    assert (res.doc["command"], res.doc["ok"]) == ("backport", True)  # as every document
    for version in ("2.31.0", "2.30.0"):
        py = realpkgs.venv(tmp_path / f"env-{version}", "requests", version)
        target = next((py.parent.parent / "lib").glob("python3*/site-packages")) / REL
        before = target.read_text()
        assert _function(before, "super_len") != _function(new, "super_len")
        # static: requests does not import without its dependencies, which the test leaves out
        done = vpatch("apply", spec, "--python", py, "--level", "static", "--json")
        assert done.code == 0 and done.patch()["outcome"] == "applied", done.out + done.err
        assert _function(target.read_text(), "super_len") == _function(new, "super_len")
        back = vpatch("rollback", "--python", py, "--json")
        assert back.code == 0 and target.read_text() == before
