"""Every process the controller starts in `patcher/` starts a Python isolated (`-I`, from a
directory of vpatch's own, without `PYTHON*` variables: patcher/isolate.py) or says why it is
not such a start (tests/support/isolation.py has the rules).

`patcher/agent/` is left out: it runs on the host (stdlib only, Python 3.9+), where its starts
are the host side's (stage 0's exec `-I -S`, probes, the restart command).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patcher import isolate
from tests.support.isolation import check_source, check_tree

PATCHER = Path(__file__).resolve().parents[2] / "patcher"

BAD = [
    # a bare `python -m pip`, the way the wheel store started pip
    "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'pip', 'list'])\n",
    # isolated, but from the caller's cwd with the caller's environment
    "import subprocess, sys\nsubprocess.run([sys.executable, '-I', '-c', 'pass'])\n",
    # through a name: one of its values is not isolated
    "import subprocess, sys\ndef f(x):\n    cmd = [sys.executable, '-I', '-c', x]\n"
    "    if x:\n        cmd = [sys.executable, '-c', x]\n"
    "    subprocess.Popen(cmd, cwd='/', env={})\n",
    # imported by name, and os.exec*
    "from subprocess import check_output\ncheck_output(['python3', 'x.py'])\n",
    "import os\nos.execv('/usr/bin/python3', ['python3', '-c', 'pass'])\n",
    # a marker without a reason is no marker
    "import subprocess\nsubprocess.run(['python3', '-m', 'x'])  # process-start:\n",
]

GOOD = [
    "import subprocess\nfrom patcher import isolate\n"
    "subprocess.run(isolate.argv(['py', '-m', 'pip']), cwd=isolate.WORKDIR, env=isolate.env())\n",
    "import subprocess, sys\ndef f():\n    cmd = isolate.argv([sys.executable, '-m', 'pip'])\n"
    "    subprocess.run(cmd, cwd='/', env={})\n",
    "import subprocess\n# process-start: the OpenSSH client (not a Python)\n"
    "subprocess.run(['ssh', 'h'])\n",
]


@pytest.mark.parametrize("source", BAD)
def test_the_checker_finds_an_unisolated_start(source: str) -> None:
    assert len(check_source(source)) == 1, source


@pytest.mark.parametrize("source", GOOD)
def test_the_checker_accepts_an_isolated_or_explained_start(source: str) -> None:
    assert check_source(source) == []


def test_every_process_start_in_the_controller_is_isolated_or_explained() -> None:
    findings: list[str] = []
    seen = 0
    for room in sorted(PATCHER.iterdir()):
        if room.name == "agent":
            continue
        if room.is_dir():
            got, n = check_tree(room)
        elif room.suffix == ".py":
            got, n = check_source(room.read_text(encoding="utf-8"), str(room)), 1
        else:
            continue
        findings += got
        seen += n
    assert findings == []
    assert seen > 10  # the walk saw the tree (pip, ssh, the bundle's child...)


def test_isolate_argv_and_env() -> None:
    assert isolate.argv(["/py", "-m", "pip", "download"]) == ["/py", "-I", "-m", "pip", "download"]
    assert isolate.argv(["/py", "-c", "x"]) == ["/py", "-I", "-c", "x"]
    assert isolate.argv(["/bin/pip", "config", "list"]) == ["/bin/pip", "config", "list"]
    assert isolate.argv(["venv/bin/python", "-m", "pip"])[0].startswith("/")
    got = isolate.env({"PIP_NO_INPUT": "1"}, {"PYTHONPATH": ".", "PYTHONHOME": "/x", "HOME": "/h"})
    assert got == {"HOME": "/h", "PIP_NO_INPUT": "1"}
