"""The `[paramiko]` hint names the installer that made vpatch's environment: `pipx inject`,
`uv tool install --with` from the source the receipt records, pip into that venv, and never
`vpatch[paramiko]` (no index has a vpatch distribution; pipx would say "already installed").
Environments are directories holding the files each installer leaves (the uv receipt as
`uv tool install` writes it); tests/integration/test_python_versions.py asks a real venv and a
real `uv tool` install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from patcher.commands import _installhint
from patcher.commands._installhint import Install, add_command, detect, uv_source

PY = "/opt/tools/vpatch env/bin/python"


def _env(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    prefix = tmp_path / name
    prefix.mkdir()
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    for rel, text in files.items():
        (prefix / rel).write_text(text)
    return prefix


RECEIPT_DIR = """[tool]
requirements = [
    { name = "vpatch", directory = "/src/vpatch" },
    { name = "six" },
]
entrypoints = [
    { name = "vpatch", install-path = "/home/u/.local/bin/vpatch", from = "vpatch" },
]
"""


@pytest.mark.parametrize(
    ("files", "has_pip", "expected"),
    [
        ({"pipx_metadata.json": "{}"}, False, "pipx inject vpatch fabric"),
        (
            {"uv-receipt.toml": RECEIPT_DIR},
            False,
            "uv tool install --with six --with fabric /src/vpatch",  # six stays
        ),
        (
            {"pyvenv.cfg": "home = /usr/bin\nuv = 0.13.9\n"},
            False,
            "uv pip install --python '/opt/tools/vpatch env/bin/python' fabric",
        ),
        ({}, True, "'/opt/tools/vpatch env/bin/python' -m pip install fabric"),
        (
            {},
            False,
            "pip --python '/opt/tools/vpatch env/bin/python' install fabric, "
            "or uv pip install --python '/opt/tools/vpatch env/bin/python' fabric",
        ),
    ],
    ids=["pipx", "uv-tool", "uv-venv", "pip", "no-pip"],
)
def test_each_installer_gets_its_own_words(
    tmp_path: Path, files: dict[str, str], has_pip: bool, expected: str
) -> None:
    prefix = _env(tmp_path, "vpatch", files)
    said = add_command(detect(prefix, PY, has_pip), "fabric")
    assert said == expected
    assert "vpatch[" not in said  # the old hint's distribution, which no index has


def test_uv_sources_are_named_again_as_given() -> None:
    def first(**req: str) -> dict[str, object]:
        return {"tool": {"requirements": [{"name": "vpatch", **req}, {"name": "fabric"}]}}

    whl = "/w/vpatch-0.1.0-py3-none-any.whl"
    assert uv_source(first(path=whl)) == (whl,)
    assert uv_source(first(url="https://example.invalid/v.whl")) == (
        "https://example.invalid/v.whl",
    )
    assert uv_source(first(git="https://example.invalid/v.git")) == (
        "git+https://example.invalid/v.git",
    )
    # `uv tool install -e /src/vpatch` records it so, and is installed so again
    assert uv_source(first(editable="/src/vpatch")) == ("--editable", "/src/vpatch")
    said = add_command(Install("uv-tool", "/x/python", source=("--editable", "/s v")), "fabric")
    assert said == "uv tool install --with fabric --editable '/s v'"
    assert uv_source(first(specifier=">=0.1")) == ("vpatch>=0.1",)  # then an index has it
    assert uv_source({}) == ()
    # no source in a receipt: uv's own venv words, never a bare `vpatch`
    said = add_command(Install("uv-tool", "/x/python"), "fabric")
    assert said == "uv pip install --python /x/python fabric"


def test_unreadable_receipt_is_no_failure(tmp_path: Path) -> None:
    prefix = _env(tmp_path, "vpatch", {"uv-receipt.toml": "[tool\n"})
    assert detect(prefix, PY, False) == Install("uv-tool", PY)


def test_the_hint_for_this_interpreter() -> None:
    """With no arguments: this interpreter's environment (the suite's venv, which `make
    install` makes with pip in it), and the command it names runs."""
    found = detect()
    assert found == Install("pip", sys.executable)
    shown = _installhint.add_command(found, "fabric").split()
    assert shown[1:] == ["-m", "pip", "install", "fabric"]
    checked = subprocess.run([shown[0], "-m", "pip", "--version"], capture_output=True)
    assert checked.returncode == 0
