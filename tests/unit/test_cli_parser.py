"""`build_parser([command])` builds only that subcommand's options (the others are listed only):
it must parse every command line exactly as the whole parser does, and refuse the same ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

from patcher import commands
from patcher.commands import build_parser
from patcher.commands._help import subcommands
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


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--inventory", "h.toml", "--group", "gpu"],
        ["apply", "a.toml", "--python", "/x/python", "--level", "static"],
        ["check", "a.toml"],
        ["matrix", "a.toml", "--pre"],
    ],
    ids=lambda a: a[0],
)
def test_json_before_the_command_is_the_commands_own(argv: list[str]) -> None:
    """`vpatch --json COMMAND ...` (issue 29) is `vpatch COMMAND ... --json`."""
    before = commands.parse(["--json", *argv])
    after = commands.parse([*argv, "--json"])
    assert before.json is True and vars(before) == vars(after)
    assert commands.parse(argv).json is False


def test_json_before_a_command_without_json_output_is_refused() -> None:
    with pytest.raises(UsageError) as got:
        commands.parse(["--json", "schema"])
    assert got.value.message == "vpatch schema has no JSON output (--json)"


def test_every_registered_command_has_a_module_that_builds_and_describes_it() -> None:
    """Each registry entry names a module with add_options/run, and clidocs words for it."""
    subs = subcommands(build_parser())
    assert list(subs) == list(commands.COMMANDS)
    for name, cmd in commands.COMMANDS.items():
        module = commands.load(name)
        assert callable(module.add_options) and callable(module.run), cmd.module
        assert subs[name].description, name  # clidocs.COMMANDS says what it does


LAZY = """\
import sys
from patcher.commands import build_parser
words = "patcher.commands._help"  # every command's description and example: the registry's
before = sorted(m for m in sys.modules if m.startswith("patcher.commands.") and m != words)
build_parser(["apply"])
after = sorted(m for m in sys.modules if m.startswith("patcher.commands.") and m != words)
print(before, after)
"""


def test_the_registry_imports_no_command_module_and_apply_only_its_own() -> None:
    """pip's commands_dict idea: listing commands imports none; `vpatch apply` builds and
    imports the hosts module (and the shared target options), never authoring, matrix or wheel
    code (tests/unit/test_startup.py pins the whole apply run)."""
    proc = subprocess.run(
        [sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=60, check=True
    )
    before, after = proc.stdout.strip().split("] [")
    assert before == "["
    assert after.rstrip("]") == "'patcher.commands._targets', 'patcher.commands.hosts'"


def test_top_help_lists_each_command_once() -> None:
    text = build_parser(()).format_help()
    assert "{apply," not in text and "\n  COMMAND\n" not in text  # issue 29: printed twice
    section = text.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    listed = [ln.split()[0] for ln in section.splitlines() if ln[2:3] != " "]
    assert listed == list(commands.COMMANDS)


@pytest.mark.parametrize("name", ["apply", "rollout", "status", "exec"])
def test_command_help_prints_despite_a_percent_in_a_metavar(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--batch N|P%`: argparse %-formats the usage parse_intermixed_args makes itself."""
    with pytest.raises(SystemExit) as done:
        commands.parse([name, "--help"])
    assert done.value.code == 0
    assert f"usage: vpatch {name}" in capsys.readouterr().out
