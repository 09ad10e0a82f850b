"""`vpatch --version` answers without importing the CLI (the start-up budget of issue 18)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from patcher import __version__


def test_version_imports_nothing_of_the_cli() -> None:
    code = (
        "import sys; sys.argv = ['vpatch', '--version']\n"
        "from patcher.entry import main\n"
        "rc = main()\n"
        "heavy = sorted(m for m in sys.modules if m.startswith(('pydantic', 'patcher.cli',"
        " 'patcher.specs.model', 'paramiko', 'fabric', 'libcst', 'rich')))\n"
        "print(rc, heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == [f"vpatch {__version__}", "0 []"]


def test_other_commands_reach_the_cli() -> None:
    code = "import sys; sys.argv = ['vpatch', 'schema']\nfrom patcher.entry import main\nmain()\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and '"$schema"' in out.stdout


def test_exit_code_and_output_survive_the_fast_exit(tmp_path: Path) -> None:
    """entry.finish skips the interpreter's teardown (os._exit): the code, stdout (a --json
    document) and stderr must still all come out."""
    code = (
        "import sys; sys.argv = ['vpatch', 'check', sys.argv[1], '--json']\n"
        "from patcher.entry import main\nmain()\nraise SystemExit(99)\n"
    )
    missing = tmp_path / "nope.toml"
    out = subprocess.run([sys.executable, "-c", code, str(missing)], capture_output=True, text=True)
    assert out.returncode == 2, out
    assert json.loads(out.stdout)["error"].startswith(str(missing)), out.stdout
