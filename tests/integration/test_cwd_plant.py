"""A `pip/` package and a `sitecustomize.py` planted in the directory where `vpatch` runs are
never imported by the interpreters vpatch starts (patcher/isolate.py).

The plant is proven first: a bare `python -m pip` started there imports the planted `pip`, and
with a caller's `PYTHONPATH=.` (a shell some operators have) the planted `sitecustomize` too.
Then `vpatch matrix` (which asks pip for the releases) runs from that directory with the same
environment, through the installed `vpatch` console script (its own directory, not the cwd, is
its `sys.path[0]`): neither plant writes its marker.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import wheellab

# Each plant records which process ran it: vpatch's own process (the operator's PYTHONPATH
# reaches it, as it reaches any program the operator starts) is not what is tested here.
PLANT = (
    "import os\n"
    "open(os.environ['VPATCH_TEST_MARKERS'] + f'/{name}-{{os.getpid()}}', 'a').write('ran')\n"
)
SPEC = wheellab.CLICK_SPEC


def _plant(cwd: Path) -> None:
    (cwd / "pip").mkdir()
    (cwd / "pip" / "__init__.py").write_text(PLANT.format(name="pip"))
    (cwd / "pip" / "__main__.py").write_text("")
    (cwd / "sitecustomize.py").write_text(PLANT.format(name="sitecustomize"))


def test_planted_pip_and_sitecustomize_in_cwd_are_not_imported(tmp_path: Path) -> None:
    cwd, markers = tmp_path / "cwd", tmp_path / "markers"
    cwd.mkdir()
    markers.mkdir()
    _plant(cwd)
    env = {
        **os.environ,
        **wheellab.offline_env(),
        "PYTHONPATH": ".",
        "VPATCH_TEST_MARKERS": str(markers),
        "VPATCH_WHEEL_STORE": str(tmp_path / "store"),
        "VPATCH_MATRIX_CACHE": str(tmp_path / "matrix"),
        "VPATCH_MATRIX_WHEELS": "",
        "VPATCH_WHEELHOUSE": "",
        "VPATCH_NO_CACHE": "1",
    }
    env.pop("VPATCH_PIP", None)
    bare = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], cwd=cwd, env=env, capture_output=True
    )
    assert bare.returncode == 0, bare.stderr
    assert sorted(p.name.split("-")[0] for p in markers.iterdir()) == ["pip", "sitecustomize"]
    for p in markers.iterdir():
        p.unlink()

    spec = tmp_path / "click.toml"
    spec.write_text(SPEC)
    vpatch = Path(sys.executable).parent / "vpatch"
    proc = subprocess.Popen(
        [str(vpatch), "matrix", str(spec), "--versions", ">=8.1,<8.2", "--json"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=300)
    others = sorted(p.name for p in markers.iterdir() if p.name != f"sitecustomize-{proc.pid}")
    assert others == [], err
    # the run got as far as asking for releases (offline: none), the Pythons it started
    # (the bundle's compile child; pip only where configured) imported nothing planted
    assert proc.returncode != 0 and "release" in out and "click" in out, (out, err)
