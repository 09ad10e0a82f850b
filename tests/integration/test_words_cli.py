"""Issue 25 case 13 through the real CLI on a pip-installed stand-in env: a dry-run rollback
says what it would do, a mistyped id is an error with a hint, options may follow positionals,
and the journal entries of an uninstalled package can be cleared (`vpatch rollback` retires
them) instead of warning on every run."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import Env, fingerprint, vpatch
from tests.support.hooklab import PIP
from tests.support.standin_specs import SPEC_A, SPEC_B


def _specs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(SPEC_A)
    b.write_text(SPEC_B)
    return a, b


def test_dry_run_rollback_says_would(tmp_path: Path, standin_env: Env) -> None:
    a, _ = _specs(tmp_path)
    py = ["--python", str(standin_env.python)]
    assert vpatch("apply", a, *py, "--level", "static").code == 0
    snap = fingerprint(standin_env.root)
    dry = vpatch("rollback", a, *py, "--dry-run", "--json")
    assert dry.code == 0, dry.err
    p = dry.patch()
    assert p["outcome"] == "would_roll_back"
    assert p["message"] == "would restore pristine bytes (pip's RECORD)"
    assert fingerprint(standin_env.root) == snap
    human = vpatch("rollback", *py, "--dry-run")
    assert "would_roll_back" in human.out and "would_apply" not in human.out
    assert "restored" not in human.out


def test_a_mistyped_id_fails_with_a_hint(tmp_path: Path, standin_env: Env) -> None:
    a, _ = _specs(tmp_path)
    py = ["--python", str(standin_env.python)]
    assert vpatch("apply", a, *py, "--level", "static").code == 0
    typo = vpatch("rollback", "servekit-kmi", *py)
    assert typo.code == 1
    assert "error: local: servekit-kmi: failed: servekit-kmi is applied on none" in typo.err
    assert "hint: a mistyped id? `vpatch status` lists" in typo.err
    right = vpatch("rollback", "servekit-kimi", *py, "--level", "static", "--json")
    assert right.code == 0 and right.patch()["outcome"] == "rolled_back", right.err


def test_options_after_positionals(tmp_path: Path, standin_env: Env) -> None:
    a, b = _specs(tmp_path)
    res = vpatch("apply", a, "--python", standin_env.python, b, "--level", "static", "--json")
    assert res.code == 0, res.err
    st = vpatch("status", a, "--python", standin_env.python, b, "--json")
    assert st.code == 0, st.err
    assert [p["outcome"] for p in st.doc["hosts"][0]["patches"]] == ["applied", "applied"]


def test_entries_of_an_uninstalled_package_can_be_retired(tmp_path: Path, standin_env: Env) -> None:
    a, _ = _specs(tmp_path)
    py = ["--python", str(standin_env.python)]
    assert vpatch("apply", a, *py, "--level", "static").code == 0
    pip = [*PIP, "--python", str(standin_env.python), "uninstall", "-y", "servekit"]
    subprocess.run(pip, check=True, capture_output=True)
    st = vpatch("status", *py, "--json")
    [warning] = st.doc["hosts"][0]["warnings"]
    assert "its package servekit is not installed any more" in warning
    assert "`vpatch rollback` retires it" in warning
    dry = vpatch("rollback", *py, "--dry-run", "--json")
    assert dry.patch()["outcome"] == "superseded" and "would be retired" in dry.patch()["message"]
    assert vpatch("status", *py, "--json").doc["hosts"][0]["warnings"] == [warning]
    back = vpatch("rollback", *py, "--json")
    assert back.code == 0 and back.patch()["outcome"] == "superseded", back.err
    again = vpatch("status", *py, "--json")
    assert again.code == 0 and again.doc["hosts"][0]["warnings"] == []
    assert list((standin_env.root / ".vpatch" / "backups").iterdir()) == []  # collected
