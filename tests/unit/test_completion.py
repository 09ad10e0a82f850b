"""`vpatch completion bash|zsh|fish`: generated from the parser, and the bash one really
completes (run in a real bash against the real `vpatch` on PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from patcher.cli import build_parser
from patcher.clidocs import subcommands
from tests.conftest import REPO, SPEC, vpatch

# `vpatch` of the dev venv on PATH: the script asks it for catalog ids.
PATH = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
COMPLETE = """
source <(vpatch completion bash)
comp() {
    COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=()
    _vpatch vpatch "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf '%s\\n' "${COMPREPLY[@]}" | sort | tr '\\n' ' '; echo
}
"""


def bash(script: str, cwd: Path = REPO) -> str:
    env = {**os.environ, "PATH": PATH}
    done = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


def test_bash_registers_the_completion() -> None:
    out = bash("source <(vpatch completion bash); complete -p vpatch")
    assert out == "complete -o default -o filenames -F _vpatch vpatch\n"


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("vpatch ap", "apply"),
        ("vpatch c", "capture catalog check completion"),
        ("vpatch verify --lev", "--level"),
        ("vpatch verify --level ''", "full import static"),
        ("vpatch apply --dry-run --level i", "import"),
        (f"vpatch apply {SPEC.stem[:-4]}", SPEC.stem),  # one id: the prefix leaves one
        ("vpatch completion ''", "bash fish zsh"),
        ("vpatch hook ''", "systemd"),
        ("vpatch matrix --ver", "--versions"),
        ("vpatch exec x -- vll", ""),  # the command after -- is not vpatch's to complete
    ],
)
def test_bash_completes(words: str, expected: str) -> None:
    lines = bash(COMPLETE + f"comp {words}\n").splitlines()
    assert lines[-1].split() == expected.split()


def test_every_subcommand_and_option_is_in_every_shell() -> None:
    parser = build_parser()
    scripts = {shell: vpatch("completion", shell) for shell in ("bash", "zsh", "fish")}
    assert all(r.code == 0 and r.err == "" for r in scripts.values())
    assert scripts["zsh"].out.endswith(scripts["bash"].out)
    assert "bashcompinit" in scripts["zsh"].out
    for name, sub in subcommands(parser).items():
        assert f"        {name})" in scripts["bash"].out
        assert f"-a {name} -d " in scripts["fish"].out
        for action in sub._actions:
            for opt in action.option_strings:
                assert f"{opt} " in scripts["bash"].out or f"{opt}'" in scripts["bash"].out
                if opt.startswith("--"):
                    assert f"from {name}' -l {opt[2:]}" in scripts["fish"].out, (name, opt)
    assert "-l level -x -a 'static import full'" in scripts["fish"].out
