"""The words that add a distribution to the environment vpatch itself runs in, for the installer
that made it: `pipx inject`, `uv tool install --with`, pip into that venv.

The `[paramiko]` extra cannot be added the way it was installed: `pipx install 'vpatch[paramiko]'`
on an installed vpatch says "already seems to be installed" and exits 0, and no index has a
`vpatch` distribution to resolve it from. What works is installing the extra's own distribution
(`fabric`, which brings paramiko) into vpatch's environment with the tool that manages it. Which
tool that is, the environment says by the files its installer leaves in it (`sys.prefix`):

- pipx: `pipx_metadata.json`; the venv's directory name is pipx's name for it;
- `uv tool install`: `uv-receipt.toml`, whose first requirement is where vpatch came from (a
  reinstall with `--with` must name the same source, or uv would look for `vpatch` on an index);
- a venv uv made: `uv = VERSION` in `pyvenv.cfg` (no pip in it);
- anything else: pip, run by vpatch's own interpreter when pip is importable there, else from
  outside (`pip --python`).

`detect` reads those files (the edge); `add_command` is the pure decision, pinned by tests.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Kind = Literal["pipx", "uv-tool", "uv-venv", "pip", "no-pip"]


@dataclass(frozen=True)
class Install:
    """How vpatch's own environment was made, as far as it says."""

    kind: Kind
    python: str  # vpatch's interpreter (sys.executable)
    name: str = ""  # pipx: the venv's name
    source: tuple[str, ...] = ()  # uv tool: the words naming where vpatch was installed from
    withs: tuple[str, ...] = ()  # uv tool: the other requirements installed with it


def uv_source(receipt: dict[str, Any]) -> tuple[str, ...]:
    """The words `uv tool install` names vpatch's source with again: a directory (editable or
    not), file, URL or git source, else the name with its version specifier (then an index
    has it). () when the receipt says none of these."""
    reqs = receipt.get("tool", {}).get("requirements", [])
    first = reqs[0] if reqs and isinstance(reqs[0], dict) else {}
    name = str(first.get("name", ""))
    if isinstance(first.get("editable"), str):
        return ("--editable", str(first["editable"]))
    for key in ("directory", "path", "url"):
        if isinstance(first.get(key), str):
            return (str(first[key]),)
    if isinstance(first.get("git"), str):
        git = str(first["git"])
        return (git if git.startswith("git+") else f"git+{git}",)
    if name:
        return (name + str(first.get("specifier", "")),)
    return ()


def uv_withs(receipt: dict[str, Any]) -> tuple[str, ...]:
    """The `--with` requirements already in the tool's environment (named from an index): a
    reinstall that did not name them again would take them out."""
    reqs = receipt.get("tool", {}).get("requirements", [])[1:]
    return tuple(
        str(r["name"]) + str(r.get("specifier", ""))
        for r in reqs
        if isinstance(r, dict)
        and isinstance(r.get("name"), str)
        and set(r) <= {"name", "specifier"}
    )


def add_command(install: Install, dist: str) -> str:
    """The command (or commands, "A, or B") that puts `dist` into vpatch's environment."""
    python = shlex.quote(install.python)
    if install.kind == "pipx":
        return f"pipx inject {shlex.quote(install.name)} {dist}"
    if install.kind == "uv-tool" and install.source:
        withs = [w for req in (*install.withs, dist) for w in ("--with", req)]
        return shlex.join(["uv", "tool", "install", *withs, *install.source])
    if install.kind in ("uv-venv", "uv-tool"):
        return f"uv pip install --python {python} {dist}"
    if install.kind == "pip":
        return f"{python} -m pip install {dist}"
    return f"pip --python {python} install {dist}, or uv pip install --python {python} {dist}"


def detect(
    prefix: Path | None = None, python: str | None = None, has_pip: bool | None = None
) -> Install:
    """What made the environment at `prefix` (default: vpatch's own, whose interpreter `python`
    can import pip or not: `has_pip`), from its installer's files. Unreadable files count as
    absent: the answer is a hint, never a reason to fail."""
    prefix = Path(sys.prefix) if prefix is None else prefix
    python = sys.executable if python is None else python
    if (prefix / "pipx_metadata.json").is_file():
        return Install("pipx", python, name=prefix.name)
    receipt = prefix / "uv-receipt.toml"
    if receipt.is_file():
        from patcher._compat import tomllib

        try:
            data = tomllib.loads(receipt.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            data = {}
        withs = tuple(w for w in uv_withs(data) if w != "fabric")
        return Install("uv-tool", python, source=uv_source(data), withs=withs)
    try:
        cfg = (prefix / "pyvenv.cfg").read_text()
    except (OSError, UnicodeDecodeError):
        cfg = ""
    if any(line.partition("=")[0].strip() == "uv" for line in cfg.splitlines()):
        return Install("uv-venv", python)
    if has_pip is None:
        import importlib.util

        has_pip = importlib.util.find_spec("pip") is not None
    return Install("pip" if has_pip else "no-pip", python)


def add_to_vpatch(dist: str) -> str:
    """The command that adds `dist` to the environment this vpatch runs in."""
    return add_command(detect(), dist)
