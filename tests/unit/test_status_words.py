"""Issue 39 items 12 and 13: words that contradicted themselves or read wrong, each rendered
by the code that prints it (the human status summary, a restart step's failure, the matrix
header, the ambiguous-match hint)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from patcher.commands import _matrixview
from patcher.inventory.targets import Target
from patcher.output import report
from patcher.result import HostResult, PatchResult, RunResult
from patcher.rollout import walk
from patcher.specs import catalog
from patcher.wheels.matrix import Matrix, Release
from tests.conftest import REPO
from tests.support import rolloutfake
from tests.support.rolloutfake import FakeHost


def _human(result: RunResult) -> str:
    from patcher.output import human

    out = io.StringIO()
    human.render_human(result, out=out)
    return out.getvalue()


def test_a_summary_without_specs_has_no_empty_brackets() -> None:
    hosts = [HostResult(f"h{i}", ok=True) for i in range(6)]
    text = _human(RunResult("status", True, hosts))
    assert text.rstrip().endswith("status: ok (6 host(s))"), text
    one = RunResult("status", True, [HostResult("h1", ok=True, patches=[_applied()])])
    assert _human(one).rstrip().endswith("status: ok (1 host(s)) [1 applied]")


def _applied() -> PatchResult:
    return PatchResult("x", "servekit", "1.0.0", "applied", "has the journal's hash")


class _Silent(FakeHost):
    """A restart command that fails without a word on stdout or stderr (`false`)."""

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        return {"ok": True, "exit": 1, "timed_out": False, "seconds": 0.0, "stdout": ""}


def test_a_silent_failed_restart_has_no_dangling_colon() -> None:
    specs = catalog.load_all([str(REPO / "patches" / "vllm-eagle3-mla-backport.toml")])
    cfg = rolloutfake.settings(restart="false")
    h = rolloutfake.host(_Silent(), Target("h1", "h1"), specs, cfg, "r1")
    with pytest.raises(walk._StepFailed) as got:
        walk._step_restart(h)
    assert str(got.value) == "`false` exited 1 after 0.0 s"


def test_the_matrix_header_counts_one_release_in_the_singular() -> None:
    out = io.StringIO()
    rows = [Release("1.0", 0, "would_apply", "ok")]
    _matrixview.render_human(Matrix("x", "servekit", rows, "==1.0"), out=out)
    assert "x: servekit ==1.0 (1 release)" in out.getvalue().splitlines()[0]


def test_the_ambiguous_hint_names_occurrence() -> None:
    bad = PatchResult("x", "servekit", "1.0.0", "ambiguous", "match check(data) matches 2 places")
    result = RunResult("apply", False, [HostResult("h1", patches=[bad])])
    [(_msg, hint)] = report.problems(result)
    assert "`occurrence = N`" in hint, hint
