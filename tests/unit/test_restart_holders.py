"""The restart-required rule (patcher.agent.holders) on facts as data: golden cases in
tests/cases/restart/, and the readers of a command line it is built on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patcher.agent import holders

CASES = sorted((Path(__file__).resolve().parent.parent / "cases" / "restart").glob("*.json"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden(path: Path) -> None:
    case = json.loads(path.read_text())
    got = holders.decide(case["procs"], case["changes"], case["at"])
    assert [{"pid": p["pid"], "why": p["why"]} for p in got] == case["want"], case["about"]
    by_pid = {p["pid"]: p for p in case["procs"]}
    for p in got:
        assert p["started"] == by_pid[p["pid"]]["started"]
        assert p["cmdline"] == " ".join(by_pid[p["pid"]]["argv"])[:300]


def test_there_are_cases() -> None:
    assert len(CASES) >= 10


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["py", "-m", "vllm.x"], ("m", "vllm.x")),
        (["py", "-Im", "vllm"], ("m", "vllm")),
        (["py", "-mvllm"], ("m", "vllm")),
        (["py", "-I", "-S", "-c", "import x"], ("c", "import x")),
        (["py", "-Wignore", "-c", "x"], ("c", "x")),
        (["py", "-W", "ignore", "-X", "dev", "s.py", "-m", "no"], ("script", "s.py")),
        (["py", "--check-hash-based-pycs", "always", "s.py"], ("script", "s.py")),
        (["py", "-u", "--", "-s.py"], ("script", "-s.py")),
        (["py", "-"], ("", "")),
        (["py"], ("", "")),
        (["VLLM::EngineCore"], ("", "")),
        (["py", "-c"], ("c", "")),
    ],
)
def test_program(argv: list[str], want: tuple[str, str]) -> None:
    assert holders.program(argv) == want


def test_imports() -> None:
    code = (
        "import os, servekit.config as c\n"
        "from vllm.entrypoints.cli.main import main\n"
        "x = 1; import json\n"
        "mod = importlib.import_module('torch.nn')\n"
        '__import__("yaml")\n'
        "# import commented\n"
        "s = 'import quoted'\n"
    )
    assert holders.imports(code) == {
        "os",
        "servekit.config",
        "vllm.entrypoints.cli.main",
        "json",
        "torch.nn",
        "yaml",
    }


def test_pth_imports() -> None:
    text = (
        "/srv/extra/path\n"
        "import _virtualenv\n"
        "import os; var = 'SETUPTOOLS_USE_DISTUTILS'; "
        "enabled == 'local' and __import__('_distutils_hack').add_shim();\n"
        "# import nothing\n"
    )
    assert holders.pth_imports(text) == {"_virtualenv", "os", "_distutils_hack"}
    assert holders.everyone("_distutils_hack", {"_distutils_hack"})
    assert holders.everyone("sitecustomize", set())
    assert not holders.everyone("vllm", {"_virtualenv"})


def test_valid_changes_keeps_only_what_lies_in_the_environment() -> None:
    site = "/srv/env/lib/python3.12/site-packages/"
    good = {"module": "vllm", "path": site + "vllm/", "at": 5.0, "every": False}
    raw = [
        good,
        dict(good, path="/etc/"),
        dict(good, path=site + "../../../../etc/"),
        dict(good, at="soon"),
        dict(good, at=True),
        dict(good, module=7),
        "junk",
        dict(good, path="/anything", every=True),
    ]
    got = holders.valid_changes(raw, [site], 128)
    assert got == [good, dict(good, path="/anything", every=True)]
    assert holders.valid_changes(None, [site], 128) is None
    assert len(holders.valid_changes([good] * 300, [site], 128) or []) == 128


def test_changes_name_the_package_each_file_belongs_to(tmp_path: Path) -> None:
    """procs.changes: the written files, per package (a namespace directory is looked
    through), with the newest write; what every Python runs at start is `every`."""
    from patcher.agent import procs

    site = str(tmp_path / "site-packages") + "/"
    for rel in (
        "pkg/__init__.py",
        "pkg/sub/__init__.py",
        "pkg/sub/x.py",
        "google/protobuf/__init__.py",
        "google/protobuf/x.py",
        "six.py",
        "_virtualenv.py",
        "loose/y.py",
    ):
        (Path(site) / rel).parent.mkdir(parents=True, exist_ok=True)
        (Path(site) / rel).write_text("")
    (Path(site) / "_virtualenv.pth").write_text("import _virtualenv\n")
    written = [
        (site + "pkg/sub/x.py", 5.0),
        (site + "pkg/__pycache__/__init__.cpython-312.pyc", 7.0),
        (site + "google/protobuf/x.py", 5.0),
        (site + "six.py", 5.0),
        (site + "__pycache__/six.cpython-312.pyc", 6.0),
        (site + "_virtualenv.py", 5.0),
        (site + "zz.pth", 5.0),
        (site + "loose/y.py", 5.0),
        ("/elsewhere/z.py", 5.0),
    ]
    got = {c["path"]: c for c in procs.changes(written, [site])}
    assert got == {
        site + "pkg/": {"module": "pkg", "path": site + "pkg/", "at": 7.0, "every": False},
        site + "google/protobuf/": {
            "module": "google.protobuf",
            "path": site + "google/protobuf/",
            "at": 5.0,
            "every": False,
        },
        site + "six.py": {"module": "six", "path": site + "six.py", "at": 6.0, "every": False},
        site + "_virtualenv.py": {
            "module": "_virtualenv",
            "path": site + "_virtualenv.py",
            "at": 5.0,
            "every": True,
        },
        site + "zz.pth": {"module": "zz", "path": site + "zz.pth", "at": 5.0, "every": True},
        site + "loose/": {"module": "loose", "path": site + "loose/", "at": 5.0, "every": False},
        "/elsewhere/z.py": {"module": "", "path": "/elsewhere/z.py", "at": 5.0, "every": True},
    }


def test_a_program_file_is_read_only_when_it_is_a_regular_file(tmp_path: Path) -> None:
    """procs._script: the path is the process's word, and the reader may be root: a FIFO
    (whose open would block) or a device is never opened for reading; a relative path is
    the process's cwd's."""
    import os

    from patcher.agent import procs

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert procs._script(os.getpid(), ["py", str(fifo)], "") == (str(fifo), "")
    assert procs._script(os.getpid(), ["py", "/dev/null"], "") == ("/dev/null", "")
    script = tmp_path / "serve.py"
    script.write_text("import servekit.config\n")
    assert procs._script(os.getpid(), ["py", "-u", str(script)], "") == (
        str(script),
        "import servekit.config\n",
    )
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert procs._script(os.getpid(), ["py", "serve.py"], "")[0] == str(script)
    finally:
        os.chdir(here)
    assert procs._script(os.getpid(), ["py", "-c", "x"], "") == ("", "")
