"""The benchmark (bench/run.py) at its smallest: 2 real sshd hosts, one repetition, so it cannot
rot. Checks the shape of results.json only: timings on a shared machine are not test material.
pyinfra comes from the bench extra, not the test extra: its row is expected only when the venv
has it (after `make bench`)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import sshd as harness
from tests.conftest import REPO

ROWS = {
    ("floor", 2),
    ("ansible", 2),
    ("ansible-pipelining", 2),
    ("vpatch-apply", 2),
    ("vpatch-apply-cold", 2),
    ("vpatch-rollback", 2),
    ("floor-mux", 2),
    ("vpatch-apply-mux", 2),
    ("vpatch-startup", 1),
    ("vpatch-check", 1),
    ("vpatch-verify-import", 1),
    ("bare-import", 1),
}
TARGETS = {
    "apply_vs_floor",
    "rollback_vs_floor",
    "scale",
    "vs_ansible",
    "verify_import",
    "libcst_parses",
}
if importlib.util.find_spec("pyinfra") is not None:
    ROWS.add(("pyinfra", 2))
    TARGETS.add("vs_pyinfra")


def test_quick_bench_reports_every_row_and_target(tmp_path: Path) -> None:
    if not os.access(harness.SSHD, os.X_OK):
        pytest.fail(f"{harness.SSHD} is missing: apt-get install openssh-server")
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and doc["sizes"] == [2] and doc["reps"] == 1
    rows = {(r["name"], r["hosts"]): r for r in doc["rows"]}
    assert set(rows) == ROWS
    for key, row in rows.items():
        assert row["runs"] == 1, key
        assert math.isfinite(row["wall_s"]["median"]) and row["wall_s"]["median"] > 0, key
    # Every apply run was checked against the hosts' bytes, and parsed the one content once:
    # the first with an empty rewrite cache, the cold one without the cache.
    assert rows[("vpatch-apply", 2)]["libcst_parses"]["samples"] == [1]
    assert rows[("vpatch-apply-cold", 2)]["libcst_parses"]["samples"] == [1]
    # The shared connections' masters (bench/mux.py) were closed afterwards: none is left.
    masters = subprocess.run(["pgrep", "-f", "ssh_config_bench_mux"], capture_output=True)
    assert masters.stdout == b"", masters.stdout
    targets = {t["target"]: t for t in doc["targets"]}
    assert set(targets) == TARGETS
    assert targets["scale"]["met"] is None  # one host count: nothing to compare
    assert targets["libcst_parses"]["met"] is True
    for t in targets.values():
        assert t["met"] in (True, False, None) and t["measured"], t
    # The controller-only row: the real apply path for 1,000 simulated targets, all applied.
    sim = doc["controller_only"]
    assert sim["targets"] == 1000 and sim["agent_calls"] >= 1000  # ops: whatever the protocol has
    assert sim["cpu_ms_per_target"] > 0 and sim["rss_kib_per_target"] >= 0
    # The table a person reads names every row; results.md is written next to the JSON.
    for name, _ in ROWS:
        assert name in proc.stdout
    assert "simulated targets" in proc.stdout
    assert "| row | 2 hosts |" in out.with_suffix(".md").read_text()
