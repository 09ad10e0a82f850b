"""`vpatch completion bash|zsh|fish`: generated from the parser, and the bash one really
completes (run in a real bash against the real `vpatch` on PATH)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patcher.clidocs import subcommands
from patcher.commands import build_parser
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


def _names_lab(tmp_path: Path) -> Path:
    """An ssh_config with an Include and wildcard/negated patterns, and an INI inventory."""
    ssh = tmp_path / ".ssh"
    (ssh / "conf.d").mkdir(parents=True)
    (ssh / "config").write_text(
        "Host gpu-a gpu-b *.corp\n  User x\nInclude conf.d/*\nHost !no ok-1\n"
    )
    (ssh / "conf.d" / "extra").write_text("Host inc-host\n")
    (tmp_path / "inv.ini").write_text("[web]\nw1\nw2\n[db]\nd1\n")
    return tmp_path


def test_names_from_the_inventory_and_ssh_config(tmp_path: Path) -> None:
    home = _names_lab(tmp_path)
    cfg = str(home / ".ssh" / "config")
    env = {"HOME": str(home)}
    hosts = vpatch(
        "completion",
        "--names",
        "hosts",
        "--inventory",
        home / "inv.ini",
        "--ssh-config",
        cfg,
        env=env,
    )
    assert hosts.out.split() == ["w1", "w2", "d1", "local", "gpu-a", "gpu-b", "inc-host", "ok-1"]
    groups = vpatch("completion", "--names", "groups", "--inventory", home / "inv.ini", env=env)
    assert groups.out.split() == ["db", "web"]
    broken = vpatch(
        "completion",
        "--names",
        "hosts",
        "--inventory",
        home / "nope.ini",
        "--ssh-config",
        cfg,
        env=env,
    )
    assert broken.code == 0 and broken.err == "" and "gpu-a" in broken.out.split()


def test_bash_completes_hosts_and_groups(tmp_path: Path) -> None:
    home = _names_lab(tmp_path)
    script = f"export HOME={home}\n" + COMPLETE
    script += "comp vpatch status --inventory inv.ini --host ''\n"
    script += "comp vpatch status --inventory=inv.ini --group ''\n"
    script += "comp vpatch apply x --host gpu\n"
    out = bash(script, cwd=home).splitlines()
    assert set(out[-3].split()) >= {"w1", "w2", "d1", "gpu-a", "gpu-b", "inc-host", "ok-1"}
    assert out[-2].split() == ["db", "web"]
    assert out[-1].split() == ["gpu-a", "gpu-b"]


# Real Tab presses in an interactive zsh (zpty): each line is typed, Tab completes it, and a
# key bound to a widget appends the resulting command line to a file.
ZPTY = r"""
zmodload zsh/zpty
out=$1; shift
zpty -b z 'zsh -f -i'
zpty -w z 'autoload -U compinit && compinit -u -D; source <(vpatch completion zsh)'
zpty -w z '_vp_show() { print -r -- "$BUFFER" >> '$out'; BUFFER=""; }'
zpty -w z 'zle -N _vp_show; bindkey "^X" _vp_show'
for w in "$@"; do
  zpty -w -n z "$w"$'\t\C-x'
done
for i in {1..300}; do
  [[ -f $out && $(wc -l < $out) -ge $# ]] && break
  sleep 0.1
done
zpty -d z
"""


def test_zsh_completes_on_tab(tmp_path: Path) -> None:
    """`_vpatch:4: unrecognized modifier 'C'` on every Tab, before: zsh read the bash
    function's `${COMP_WORDS[@]:1:COMP_CWORD-1}` as a history modifier."""
    zsh = shutil.which("zsh")
    assert zsh, "zsh is needed (Debian: apt-get install zsh)"
    home = _names_lab(tmp_path)
    inv = "vpatch status --inventory inv.ini"
    lines = {
        "vpatch ap": "vpatch apply",
        "vpatch verify --lev": "vpatch verify --level",
        "vpatch verify --level st": "vpatch verify --level static",
        "vpatch completion z": "vpatch completion zsh",
        f"{inv} --host inc": f"{inv} --host inc-host",
        f"{inv} --group d": f"{inv} --group db",
    }
    out = tmp_path / "buffers"
    script = tmp_path / "drive.zsh"
    script.write_text(ZPTY)
    env = {**os.environ, "PATH": PATH, "HOME": str(home)}
    done = subprocess.run(
        [zsh, "-f", str(script), str(out), *lines],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text().splitlines() == list(lines.values())


def test_zsh_runs_the_function_without_errors() -> None:
    """The same words as the bash cases, through zsh's bashcompinit: no error on stderr, and
    what bash completes among what zsh is offered (zsh filters by the prefix itself)."""
    zsh = shutil.which("zsh")
    assert zsh, "zsh is needed (Debian: apt-get install zsh)"
    script = (
        "autoload -U compinit && compinit -u -D\nsource <(vpatch completion zsh)\n"
        'comp() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=()\n'
        '  _vpatch vpatch "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"\n'
        '  print -r -- "${COMPREPLY[*]}" }\n'
        "comp vpatch ap\ncomp vpatch verify --level ''\ncomp vpatch hook ''\n"
    )
    env = {**os.environ, "PATH": PATH, "HOME": "/nonexistent"}
    done = subprocess.run(
        [zsh, "-f", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    first, level, hook = done.stdout.splitlines()
    assert "apply" in first.split() and sorted(level.split()) == ["full", "import", "static"]
    assert hook.split() == ["systemd"]


def test_fish_completes(tmp_path: Path) -> None:
    fish = shutil.which("fish")
    assert fish, "fish is needed (Debian: apt-get install fish)"
    home = _names_lab(tmp_path)
    asks = {
        "vpatch ap": ["apply"],
        "vpatch verify --level ": ["full", "import", "static"],
        "vpatch status --inventory inv.ini --group ": ["db", "web"],
        "vpatch status --inventory inv.ini --host inc": ["inc-host"],
    }
    script = "vpatch completion fish | source\n" + "".join(
        f"complete -C {shlex.quote(words)}; echo ---\n" for words in asks
    )
    env = {**os.environ, "PATH": PATH, "HOME": str(home)}
    done = subprocess.run(
        [fish, "--no-config", "-c", script],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    got = [[ln.split("\t")[0] for ln in b.strip().splitlines()] for b in done.stdout.split("---")]
    assert got[: len(asks)] == list(asks.values())
