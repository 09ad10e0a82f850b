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
