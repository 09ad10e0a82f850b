"""`--color auto|always|never`, NO_COLOR and CLICOLOR_FORCE, as the CLIs users know: the flag
wins, then NO_COLOR, then CLICOLOR_FORCE, then whether the output is a terminal. Asked of the
real CLI (`vpatch status` of this interpreter, whose summary line is bold green), its stdout a
pipe or a real pseudo-terminal; and the decision table itself, in microseconds."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from patcher.output import colour
from tests.conftest import REPO, VPATCH, vpatch

ESC = "\x1b["
FORCED = {"force_terminal": True, "no_color": False, "color_system": "standard"}


@pytest.mark.parametrize(
    ("choice", "environ", "expected"),
    [
        ("auto", {}, {}),  # rich's own detection: a terminal colours, a pipe does not
        ("auto", {"NO_COLOR": "1"}, {"color_system": None}),
        ("auto", {"NO_COLOR": ""}, {}),  # set but empty: not set (no-color.org)
        ("auto", {"CLICOLOR_FORCE": "1"}, FORCED),
        ("auto", {"CLICOLOR_FORCE": "0"}, {}),
        ("auto", {"NO_COLOR": "1", "CLICOLOR_FORCE": "1"}, {"color_system": None}),
        ("always", {"NO_COLOR": "1"}, FORCED),  # the flag wins
        ("never", {"CLICOLOR_FORCE": "1"}, {"color_system": None}),
    ],
)
def test_decision(choice: colour.Choice, environ: dict[str, str], expected: object) -> None:
    assert colour.console_options(choice, environ) == expected


def _env(**more: str) -> dict[str, str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NO_COLOR", "CLICOLOR_FORCE", "FORCE_COLOR", "TTY_COMPATIBLE")
    }
    return {**clean, "TERM": "xterm-256color", **more}


def _status(tmp_path: Path, *flags: str, **env: str) -> str:
    """`vpatch status` of this interpreter, stdout a pipe: what it printed there."""
    res = vpatch("status", "--python", sys.executable, "--state-dir", tmp_path, *flags,
                 env=_env(**env))  # fmt: skip
    assert res.code == 0, res.err
    assert "status: ok" in res.out
    return res.out


def _status_on_a_terminal(tmp_path: Path, *flags: str, **env: str) -> str:
    """The same, stdout a pseudo-terminal: all it wrote there."""
    primary, secondary = pty.openpty()
    argv = [*VPATCH, "status", "--python", sys.executable, "--state-dir", str(tmp_path), *flags]
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(**env), stdout=secondary,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    os.close(secondary)
    out = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(primary)
    assert proc.wait(timeout=120) == 0
    text = out.decode()
    assert "status: ok" in text
    return text


def test_a_pipe_gets_no_colour_unless_asked(tmp_path: Path) -> None:
    assert ESC not in _status(tmp_path)
    assert ESC not in _status(tmp_path, "--color", "never")
    assert ESC + "1;32mstatus: ok" in _status(tmp_path, "--color", "always")
    assert ESC + "1;32mstatus: ok" in _status(tmp_path, "--color=always", NO_COLOR="1")
    assert ESC + "1;32mstatus: ok" in _status(tmp_path, CLICOLOR_FORCE="1")
    assert ESC not in _status(tmp_path, CLICOLOR_FORCE="1", NO_COLOR="1")
    assert ESC not in _status(tmp_path, "--color", "auto", CLICOLOR_FORCE="0")


def test_a_terminal_gets_colour_unless_told_not_to(tmp_path: Path) -> None:
    assert ESC + "1;32mstatus: ok" in _status_on_a_terminal(tmp_path)
    assert ESC not in _status_on_a_terminal(tmp_path, "--color", "never")
    assert ESC not in _status_on_a_terminal(tmp_path, NO_COLOR="1")


def test_color_before_the_command_word_and_bad_values(tmp_path: Path) -> None:
    """`vpatch --color always status ...` is `vpatch status ... --color always`; a value that
    is none of the three is a usage error (exit 2) before anything runs."""
    res = vpatch("--color", "always", "status", "--python", sys.executable,
                 "--state-dir", tmp_path, env=_env())  # fmt: skip
    assert res.code == 0 and ESC + "1;32mstatus: ok" in res.out, res.err
    for argv in (["--color", "pink", "status"], ["status", "--color=pink"]):
        bad = vpatch(*argv, env=_env())
        assert bad.code == 2 and bad.out == "", bad.err
        assert "--color" in bad.err and "pink" in bad.err and "Traceback" not in bad.err
