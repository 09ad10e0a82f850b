"""Pure parts of the pre-start hooks: systemd quoting, which python a command runs on, the
`exec` argv split and the one-line-per-problem rendering."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from patcher.cli import _split_exec
from patcher.commands import _ensureview, hooks
from patcher.errors import UsageError
from patcher.result import HostResult, PatchResult, ProbeResult, RunResult
from tests.support.hooklab import systemd_unquote

WORDS = [
    "/srv/venv/bin/python",
    "with space",
    'say "hi"',
    "back\\slash",
    "100%",
    "%n",
    "$HOME",
    "${X}",
    "",
    "--level=full",
    "it's",
    "ünïcode",
]


def test_systemd_quote_round_trips() -> None:
    line = " ".join(hooks.systemd_quote(w) for w in WORDS)
    assert systemd_unquote(line) == WORDS
    assert hooks.systemd_quote("/srv/venv/bin/python") == "/srv/venv/bin/python"
    assert hooks.systemd_quote("%n") == '"%%n"' or hooks.systemd_quote("%n") == "%%n"
    with pytest.raises(UsageError):
        hooks.systemd_quote("two\nlines")


def script(tmp_path: Path, name: str, text: str | bytes) -> str:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    p.chmod(0o755)
    return str(p)


def test_interpreter_for_console_scripts(tmp_path: Path) -> None:
    assert hooks.interpreter_for("/srv/venv/bin/python3.11") == "/srv/venv/bin/python3.11"
    direct = script(tmp_path, "vllm", "#!/srv/venv/bin/python\nimport sys\n")
    assert hooks.interpreter_for(direct) == "/srv/venv/bin/python"
    # pip's launcher when the interpreter path has spaces or is too long for a shebang.
    launcher = "#!/bin/sh\n'''exec' \"/srv/my venv/bin/python\" \"$0\" \"$@\"\n' '''\nimport x\n"
    assert hooks.interpreter_for(script(tmp_path, "long", launcher)) == "/srv/my venv/bin/python"
    env = script(tmp_path, "envy", "#!/usr/bin/env -S python3 -u\n")
    found = hooks.interpreter_for(env)
    assert found is not None and found.endswith("/python3")
    assert hooks.interpreter_for(script(tmp_path, "sh", "#!/bin/sh\necho hi\n")) is None
    assert hooks.interpreter_for(script(tmp_path, "elf", b"\x7fELF\x02\x01")) is None
    assert hooks.interpreter_for(script(tmp_path, "rel", "#!python\n")) is None
    assert hooks.interpreter_for(str(tmp_path / "missing")) is None


def test_exec_python_needs_an_answer(tmp_path: Path) -> None:
    sh = script(tmp_path, "start.sh", "#!/bin/sh\nexec vllm serve\n")
    assert hooks.exec_python(sh, "/srv/venv/bin/python") == "/srv/venv/bin/python"
    with pytest.raises(UsageError, match="cannot tell which python"):
        hooks.exec_python(sh, None)


def test_exec_argv_split_leaves_the_command_alone() -> None:
    argv = ["exec", "a.toml", "--python", "p", "--", "vllm", "serve", "--", "--python", "x"]
    assert _split_exec(argv) == (
        ["exec", "a.toml", "--python", "p"],
        ["vllm", "serve", "--", "--python", "x"],
    )
    assert _split_exec(["exec", "a.toml"]) == (["exec", "a.toml"], None)
    assert _split_exec(["apply", "a.toml", "--", "b"]) == (["apply", "a.toml", "--", "b"], None)


def test_one_line_per_problem() -> None:
    ok = PatchResult("a", "pkg", "1.0", "already_applied")
    bad = PatchResult("b", "pkg", "0.9", "not_applicable", "pkg 0.9 is in no variant's range")
    probe = PatchResult("c", "pkg", "1.0", "applied", probes=[ProbeResult("p", False, "boom")])
    hosts = [
        HostResult("h1", patches=[ok, bad, probe]),
        HostResult("h2", error="h2: cannot connect"),
    ]
    result = RunResult("ensure", False, hosts)
    assert _ensureview.problem_lines(result) == [
        "error: h1: b: not_applicable: pkg 0.9 is in no variant's range",
        "error: h1: c: applied: p: boom",
        "error: h2: cannot connect",
    ]
    out, err = io.StringIO(), io.StringIO()
    _ensureview.render_ensure(result, out, err)
    assert out.getvalue() == ""
    assert err.getvalue().splitlines()[-1].startswith("ensure: 3 problem(s) on 2 host(s)")
