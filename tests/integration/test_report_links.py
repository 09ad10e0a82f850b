"""`--report FILE` and capture's `-o` refuse a link or a stranger's name planted at FILE
before any host is contacted: exit 2, one `error:` and one `hint:` line (with `--json`, one
JSON document), the link's target untouched, nothing new in the directory."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytest

from patcher.commands import authoring
from patcher.errors import UsageError
from tests.conftest import vpatch
from tests.support.specs import demo_fix


@pytest.mark.parametrize("as_json", [False, True])
def test_status_report_through_a_planted_link_is_refused(tmp_path: Path, as_json: bool) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    report = tmp_path / "report.json"
    report.symlink_to(victim)
    before = sorted(os.listdir(tmp_path))
    run = vpatch(
        "status", "--python", sys.executable, "--report", report, *(["--json"] if as_json else [])
    )
    assert run.code == 2, run.err
    errors = [ln for ln in run.err.splitlines() if ln.startswith(("error:", "hint:"))]
    assert [e.split(":")[0] for e in errors] == ["error", "hint"], run.err
    assert "symbolic link" in errors[0] and "Traceback" not in run.err
    if as_json:
        assert "symbolic link" in json.loads(run.out)["error"]
    else:
        assert run.out == ""
    assert victim.read_text() == "root's\n"
    assert sorted(os.listdir(tmp_path)) == before and report.is_symlink()


def test_capture_output_as_a_dangling_link_is_refused(tmp_path: Path) -> None:
    """A dangling link at `-o` read as "not there" (os.path.exists follows links): the spec
    would have been written through it, wherever it points."""
    out = tmp_path / "my-fix.toml"
    out.symlink_to(tmp_path / "cron-job")
    args = argparse.Namespace(
        id="my-fix", output=str(out), versions=None, neighbours=3, command="capture"
    )
    with pytest.raises(UsageError, match="exists"):
        authoring.validate(args)
    assert not (tmp_path / "cron-job").exists()


def test_wheel_output_name_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    """`vpatch wheel -o DIR` into a directory where the patched wheel's name (learnt from a
    first run) was planted as a link: refused, the link's target untouched."""
    from tests.support.wheellab import fake_wheel

    wheel = fake_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b"X = 1\n"})
    spec = tmp_path / "demo-fix.toml"
    spec.write_text(demo_fix("demo/__init__.py"))
    out = tmp_path / "out"
    out.mkdir()
    args = ("wheel", spec, "--package", "demo==1.0", "--from-wheel", wheel, "-o", out)
    first = vpatch(*args)
    assert first.code == 0, first.err
    [built] = out.glob("*.whl")
    built.unlink()
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    built.symlink_to(victim)
    again = vpatch(*args)
    assert again.code == 2 and "symbolic link; refused" in again.err, again.err
    assert victim.read_text() == "root's\n" and built.is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [built.name]
