"""`patcher.authoring.backport.summary`: a back-ported spec says it came from an upstream diff
(it read "Hand edit of PKG V, captured", as a host's capture does)."""

from __future__ import annotations

from patcher.authoring.backport import summary


def test_a_backport_says_it_came_from_an_upstream_diff() -> None:
    got = summary("/tmp/x/eagle3-0.17.0-0.18.0.diff", "vllm", "0.17.0")
    assert (
        got
        == "Backport of eagle3-0.17.0-0.18.0.diff (an upstream diff against vllm 0.17.0), captured"
    )
    assert summary("-", "click", "8.1.7").startswith("Backport of the diff on stdin (an upstream")
