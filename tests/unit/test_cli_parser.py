"""`build_parser([command])` builds only that subcommand's options (the others are listed only):
it must parse every command line exactly as the whole parser does, and refuse the same ones."""

from __future__ import annotations

import pytest

from patcher.commands import build_parser
from patcher.errors import UsageError

LINES = [
    ["apply", "a.toml", "--inventory", "h.toml", "--level", "static", "--json", "--parallel", "4"],
    ["apply", "a.toml", "b.toml", "--host", "ops@gpu-01:2222", "--dry-run", "--diff"],
    ["verify", "a.toml", "--metrics", "http://127.0.0.1:8000/metrics", "--min-acceptance", "40%"],
    ["rollback", "--host", "h1", "--force"],
    ["rollback", "servekit-kimi", "--level", "static", "--ssh-client", "paramiko"],
    ["status", "--inventory", "h.toml", "--group", "gpu", "--canary", "1"],
    ["ensure", "a.toml", "--python", "/opt/venv/bin/python"],
    ["check", "a.toml", "--json"],
    ["matrix", "a.toml"],
    ["completion", "bash"],
    ["schema"],
]
BAD = [
    ["apply"],  # no SPEC
    ["apply", "a.toml", "--metrics", "x"],  # verify's option
    ["status", "--level", "static"],
    ["rollback", "--parallel", "many"],
    ["aply", "a.toml"],
]


@pytest.mark.parametrize("argv", LINES, ids=[" ".join(a[:2]) for a in LINES])
def test_one_command_parses_like_the_whole_cli(argv: list[str]) -> None:
    assert vars(build_parser([argv[0]]).parse_args(argv)) == vars(build_parser().parse_args(argv))


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a[:2]) for a in BAD])
def test_one_command_refuses_like_the_whole_cli(argv: list[str]) -> None:
    messages = []
    for parser in (build_parser([argv[0]]), build_parser()):
        with pytest.raises(UsageError) as got:
            parser.parse_args(argv)
        messages.append(got.value.message)
    assert messages[0] == messages[1]
