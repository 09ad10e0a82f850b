"""patcher.progress's pure parts: the words of the live line (read off an agent request), the
agent command line -v shows, and the global options read before the command word."""

from __future__ import annotations

from patcher import progress
from patcher.commands import leading_globals


def test_an_exchange_is_named_by_its_ops() -> None:
    commit = {"op": "commit", "then": [{"op": "verify"}, {"op": "verify"}, {"op": "inspect"}]}
    assert progress.describe(commit) == "writing, checking (imports, probes), inspecting"
    ahead = {"op": "inspect", "then_if": {"fp": [{"op": "commit"}, {"op": "verify"}]}}
    assert progress.describe(ahead) == (
        "inspecting (then, if as planned: writing, checking (imports, probes))"
    )
    assert progress.describe({"op": "fetch"}) == "fetch"


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
