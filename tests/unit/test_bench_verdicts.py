"""bench/verdicts.py, small: the JSON document's shape and a few facts of the rules (not
their rates: a handful of windows says nothing of those; `python -m bench.verdicts` does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import verdicts

NAMED = {
    "regress20",
    "regress5",
    "neutral",
    "load_doubled_control",
    "bursty",
    "latency_buckets",
    "acceptance15",
}
KEYS = {"scenario", "rule", "runs", "false_fail", "false_pass", "median_scrapes", "p90_scrapes"}


def test_the_document_has_a_row_per_scenario_and_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "v.json"
    assert verdicts.main(["--runs", "3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = {(r["scenario"], r["rule"]): r for r in doc["rows"]}
    assert NAMED <= {s for s, _ in rows} and {r for _, r in rows} == {"today", "sequential"}
    assert len(rows) == len(doc["rows"]) == 2 * len(verdicts.SCENARIOS)
    for r in doc["rows"]:
        assert KEYS <= set(r) and r["runs"] == 3, r
        # a good patch can only fail falsely, a bad one only pass falsely
        assert (r["false_fail"] is None) == (r["false_pass"] is not None), r
    # today's rule never looks before --window's 20 scrapes; the sequential rule may
    assert all(
        r["median_scrapes"] >= verdicts.WINDOW_SCRAPES for r in doc["rows"] if r["rule"] == "today"
    )
    assert rows[("acceptance15", "sequential")]["median_scrapes"] <= 3
    assert rows[("regress20", "sequential")]["false_pass"] == 0.0
    assert "acceptance15" in capsys.readouterr().out  # the table, side by side


def test_a_bad_count_of_runs_is_one_error_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "v.json"
    assert verdicts.main(["--runs", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: ") and err[1].startswith("hint: ") and not out.exists()
