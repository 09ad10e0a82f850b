"""Helpers the hook tests share: unquoting systemd command lines, the stand-in serve command
and spec, pip reinstall argv, and the recipes of docs/hooks.md as runnable text."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from tests.conftest import REPO, VPATCH
from tests.support.specs import probe
from tests.support.standin_specs import KIMI, spec_a


def systemd_unquote(line: str) -> list[str]:
    """systemd's reading of an Exec line, for the words systemd_quote writes: shell-like
    double quotes with backslash escapes, then `%%` -> `%` and `$$` -> `$` in every word."""
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line)]


PIP = [sys.executable, "-m", "pip", "-q"]


REINSTALL = ["install", "--force-reinstall", "--no-deps", "--no-index"]


SERVE = "import os, servekit.config as c; print(os.getpid(), c.LIMITS['max_batch'])"


def counting_spec(tmp_path: Path, versions: str = ">=1.0") -> tuple[Path, Path]:
    """SPEC_A plus a probe that leaves a mark each time it runs."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    marker = tmp_path / "probe-runs"
    count = probe("count", "servekit.config", f"open({str(marker)!r}, 'a').write('x')")
    text = spec_a(versions=versions, probes=[KIMI, count])
    path = tmp_path / "servekit-kimi.toml"
    path.write_text(text)
    return path, marker


def recipe(name: str, doc: Path | None = None) -> str:
    """The fenced block right after `<!-- recipe: NAME -->` in `doc` (docs/hooks.md)."""
    doc = doc or DOC
    m = re.search(rf"<!-- recipe: {name} -->\n```[a-z0-9]*\n(.*?)\n```", doc.read_text(), re.S)
    assert m, f"no recipe {name!r} in {doc}"
    return m.group(1)


def swap(argv: list[str], paths: dict[str, str]) -> list[str]:
    """The doc's argv on this machine: vpatch is run as the tests run it, paths are mapped."""
    if argv[0] in (DOC_VPATCH, "vpatch"):
        argv = [*VPATCH, *argv[1:]]
    return [paths.get(a, a) for a in argv]


DOC = REPO / "docs" / "hooks.md"


DOC_VPATCH = "/opt/vpatch/bin/vpatch"
