"""Issue 25 case 13, the words: tables print what they are given (rich markup is not
interpreted), options may follow positionals, and a dry-run rollback says what it would do."""

from __future__ import annotations

import io

from rich.console import Console

from patcher import commands
from patcher.commands import _matrixview
from patcher.output.human import summary_table
from patcher.result import HostResult, PatchResult, RunResult
from patcher.wheels import matrix

QUOTED = 'anchor "supported = [...]" not found; [bold]kept[/bold] [red]'


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_the_matrix_table_keeps_brackets() -> None:
    out = _Tty()
    rows = [
        matrix.Release("1.0", None, "anchor_missing", QUOTED),
        matrix.Release("[2]", 0, "would_apply"),
    ]
    _matrixview.render_human(matrix.Matrix("s", "pkg", rows, ">=1"), out)
    assert QUOTED in out.getvalue() and "[2]" in out.getvalue()


def test_the_fleet_table_keeps_brackets() -> None:
    hosts = [
        HostResult(f"[h{i}]", patches=[PatchResult("a", "pkg", "[1.0]", "applied")])
        for i in range(2)
    ]
    buf = io.StringIO()
    Console(file=buf, width=200).print(summary_table(RunResult("apply", True, hosts)))
    assert "[h0]" in buf.getvalue() and "[1.0]" in buf.getvalue()


def test_options_may_follow_positionals() -> None:
    args = commands.parse(["status", "a.toml", "--python", "/x/python", "b.toml", "--json"])
    assert args.command == "status" and args.specs == ["a.toml", "b.toml"]
    assert args.python == "/x/python" and args.json
    args = commands.parse(["rollback", "--dry-run", "a", "--host", "h1", "b", "--level", "static"])
    assert args.specs == ["a", "b"] and args.host == ["h1"] and args.dry_run
    assert commands.parse(["apply", "a", "--force", "b"]).specs == ["a", "b"]
    assert commands.parse(
        ["hook", "systemd", "a", "--service", "vllm", "--python", "/p", "b"]
    ).specs == ["a", "b"]
    assert commands.parse(["completion", "bash"]).shell == "bash"
