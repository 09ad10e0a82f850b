"""patcher.output.progress's pure parts: the words of the live line (read off an agent request), the
agent command line -v shows, and the global options read before the command word."""

from __future__ import annotations

import io
import sys

import pytest

from patcher.commands import leading_globals
from patcher.output import progress


def test_an_exchange_is_named_by_its_ops() -> None:
    commit = {"op": "commit", "then": [{"op": "verify"}, {"op": "verify"}, {"op": "inspect"}]}
    assert progress.describe(commit) == "writing, checking (imports, probes), inspecting"
    ahead = {"op": "inspect", "then_if": {"fp": [{"op": "commit"}, {"op": "verify"}]}}
    assert progress.describe(ahead) == (
        "inspecting (then, if as planned: writing, checking (imports, probes))"
    )
    assert progress.describe({"op": "new-op"}) == "new-op"


def test_the_agent_command_line_shows_its_boot_code_by_size() -> None:
    boot = "x" * 500
    line = progress.command_line(["ssh", "-o", "BatchMode=yes", "h", "python3", "-c", boot])
    assert line == "ssh -o BatchMode=yes h python3 -c '<500 bytes>'"


def test_global_options_before_the_command_word() -> None:
    rest, lead = leading_globals(["--json", "-q", "apply", "a.toml", "-v"])
    assert rest == ["apply", "a.toml", "-v"] and (lead.json, lead.quiet, lead.verbose) == (
        True,
        True,
        0,
    )
    rest, lead = leading_globals(["-vv", "--verb", "status"])
    assert rest == ["status"] and lead.verbose == 3 and not lead.quiet
    # `--ver` may be --version: left to argparse
    assert leading_globals(["--ver", "status"])[0] == ["--ver", "status"]


def test_a_download_during_a_live_line_says_itself_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """One live display at a time: a wheel download while a command's live line is drawn
    (apply's pristine fetch, capture's) updates that line instead of drawing a second."""
    from patcher.wheels import store

    err = io.StringIO()
    err.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr(sys, "stderr", err)
    progress.configure()
    try:
        with progress.live("apply: starting"):
            shown = store.StderrProgress()
            shown.fetching("servekit-1.0.0.whl")
            shown.started["servekit-1.0.0.whl"] -= 2  # past the first second
            shown.advance("servekit-1.0.0.whl", 5_000_000, 10_000_000)
            assert shown.live is None
            bar = progress._state.live
            assert bar.tasks[0].description == "downloading servekit-1.0.0.whl 5/10 MB"
            shown.fetched("servekit-1.0.0.whl")
        quiet = store.StderrProgress()  # -q: no download line at all
        progress.configure(quiet=True)
        quiet.fetching("w")
        quiet.started["w"] -= 2
        monkeypatch.setattr(sys, "stderr", io.StringIO())
        quiet.advance("w", 1, 2)
        assert sys.stderr.getvalue() == "" and quiet.live is None
    finally:
        progress.configure()
