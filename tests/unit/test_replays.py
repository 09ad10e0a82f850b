"""`patcher.authoring.replays`: a capture's replays remembered in the run and across runs, so a
warm capture (the same hand edit of the same release again) never imports libcst."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patcher._compat import tomllib
from patcher.authoring.capture import capture, spec_toml
from patcher.authoring.replays import Replays, edits_key, models_key
from patcher.specs.model import from_data

CASES = Path(__file__).resolve().parent.parent / "cases" / "capture"
CASE = CASES / "value.json"
REPO = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("VPATCH_CACHE_DIR", str(d))
    monkeypatch.delenv("VPATCH_NO_CACHE", raising=False)
    return d


def _case() -> dict[str, str]:
    case: dict[str, str] = json.loads(CASE.read_text("utf-8"))
    return case


def test_a_run_replays_each_edit_once_and_the_next_run_reads_it(cache_dir: Path) -> None:
    case = _case()
    first = Replays()
    got = capture(case["pristine"], case["edited"], "pkg/m.py", first)
    assert first.stats["applied"] >= 1 and first.stats["memo"] >= 1  # the final check: memo
    again = Replays()  # the next run
    assert capture(case["pristine"], case["edited"], "pkg/m.py", again).edits == got.edits
    assert again.stats["applied"] == 0 and again.stats["disk"] >= 1
    assert again.validated == 0  # nothing validated: pydantic never asked
    assert list((cache_dir / "replays").iterdir())


def test_the_spec_loaded_back_replays_under_the_captures_key(cache_dir: Path) -> None:
    """For every golden capture: check_spec's replay of the written spec is the one capture
    made (a warm capture's last replay is a hit too)."""
    seen = 0
    for path in sorted(CASES.glob("*.json")):
        case = json.loads(path.read_text("utf-8"))
        got = capture(case["pristine"], case["edited"], "pkg/m.py")
        if not got.edits:
            continue
        spec = from_data(tomllib.loads(spec_toml("x", "s", "pkg", "==1.0", [("pkg/m.py", got)])))
        [(_rel, loaded)] = spec.variant[0].files()
        assert models_key(loaded) == edits_key(got.edits), path.stem
        seen += 1
    assert seen >= 20


def test_a_torn_or_edited_entry_is_a_miss(cache_dir: Path) -> None:
    case = _case()
    edits = capture(case["pristine"], case["edited"], "m").edits
    want = Replays()(case["pristine"], edits)
    [entry] = list((cache_dir / "replays").iterdir())
    doc = json.loads(entry.read_text())
    assert doc["status"] == "changed"
    doc["source"] += "import os\n"  # its sha256 no longer holds
    entry.write_text(json.dumps(doc))
    again = Replays()
    assert again(case["pristine"], edits) == want
    assert again.stats == {"applied": 1, "memo": 0, "disk": 0}


def test_no_cache_turns_the_disk_off(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VPATCH_NO_CACHE", "1")
    case = _case()
    capture(case["pristine"], case["edited"], "pkg/m.py", Replays())
    assert not (cache_dir / "replays").exists()


CHILD = """
import json, sys
from pathlib import Path
from patcher.authoring.capture import CaptureError, capture
from patcher.authoring.replays import Replays
cases = [json.loads(p.read_text("utf-8")) for p in sorted(Path(sys.argv[1]).glob("*.json"))]
# a repeated statement: the candidate without `occurrence` is ambiguous, then occurrence=2 fits
twice = "print(1)\\nx = 2\\nprint(1)\\n"
cases.append({"pristine": twice, "edited": "print(1)\\nx = 2\\nprint(2)\\n"})
for case in cases:
    try:
        capture(case["pristine"], case["edited"], "pkg/m.py", Replays())
    except CaptureError:
        pass
print(json.dumps("libcst" in sys.modules))
"""


def test_a_warm_capture_does_not_import_libcst(cache_dir: Path) -> None:
    """Every golden capture and an ambiguous candidate's, twice in a fresh process each: the
    second never loads libcst, not even for the candidates that missed the first time."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def libcst_loaded() -> bool:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(CASES)],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return bool(json.loads(out))

    assert libcst_loaded() is True  # cold: every candidate is replayed by libcst
    assert libcst_loaded() is False  # warm: every replay read back
