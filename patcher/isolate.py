"""How the controller starts a Python (pip, the bundle's compile child): isolated, from a
directory of vpatch's own, without the caller's `PYTHON*` variables.

Why: the controller often runs as root in a directory someone else can write (a user's
checkout, `/tmp`). A plain `python -m pip` puts that directory first on `sys.path`, so a
`pip/` package or a `sitecustomize.py` planted there runs as root; `PYTHONPATH`,
`PYTHONSTARTUP` or `PYTHONHOME` left in the environment do the same from wherever they point.
So every interpreter vpatch starts gets `-I` (no cwd or script directory on the path, no user
site, `PYTHON*` ignored), runs with `/` as its working directory (root's, closed to others on
any sane system: nothing relative resolves into the caller's directory) and an environment
without `PYTHON*` variables (a configured pip *script* does not take `-I`; its own directory,
not the cwd, is its `sys.path[0]`, and this keeps the variables away from it too).

`tests/unit/test_subprocess_isolation.py` walks every process start in `patcher/` and fails on
one that starts a Python without going through here (or a literal `-I`/`-P`), or that does not
say why it is not a Python.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

# The working directory of every Python the controller starts: root's, writable by nobody else.
WORKDIR = "/"

# Flags that start an interpreter on a module or a command string: `PYTHON -m pip`, `-c CODE`.
_RUNS = ("-m", "-c")


def argv(cmd: Sequence[str]) -> list[str]:
    """`cmd` as vpatch runs it from WORKDIR: `-I` right after the interpreter when `cmd` starts
    a Python by `-m`/`-c` (the forms vpatch builds; a configured `VPATCH_PIP` of that form too),
    and a relative program path made absolute against the caller's directory first (it named
    the program from there; the child no longer starts there). A program that is not such an
    interpreter (a pip script, `uv pip`) keeps its words."""
    out = list(cmd)
    if not out:
        return out
    if os.sep in out[0] and not os.path.isabs(out[0]):
        out[0] = os.path.abspath(out[0])
    if len(out) >= 2 and out[1] in _RUNS:
        out.insert(1, "-I")
    return out


def env(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The caller's environment (`base`, default os.environ) without any `PYTHON*` variable,
    plus `extra`. Everything else stays: pip's own `PIP_*` settings, proxies, `HOME` (where pip
    finds its user configuration) are the operator's choices, read by pip, never run."""
    src = os.environ if base is None else base
    out = {k: v for k, v in src.items() if not k.startswith("PYTHON")}
    out.update(extra or {})
    return out
