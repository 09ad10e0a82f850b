"""`make sanity`: the vpatch.core collection under `ansible-test sanity` (validate-modules,
pylint, pep8, yamllint, compile, import, ansible-doc and the rest).

ansible-core comes from a cached venv of its own (tests/scale.py). ansible-test installs each
test's requirements into venvs it makes, bootstrapping pip there with a get-pip script it would
download from its own CI file host; here that script is a stand-in that installs pip from the
wheel ensurepip bundles, and every requirement comes through pip and its configuration, like
any other package. ansible-test's venvs and caches live under a HOME in the test cache, never in
the real ~/.ansible.

Skipped: pslint (PowerShell, none here, needs pwsh) and shellcheck (no shell scripts, needs the
binary).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests import envs, scale
from tests.conftest import REPO

COLLECTION = REPO / "ansible_collections" / "vpatch" / "core"
SKIP = ("pslint", "shellcheck")
GET_PIP = """\
# vpatch's stand-in for get-pip.py (tests/sanity.py): pip from ensurepip's bundled wheel.
import glob, os, sys, ensurepip
bundled = os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl")
sys.path.insert(0, sorted(glob.glob(bundled))[-1])
from pip._internal.cli.main import main
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", *args]))
"""


def _pip_version(bin_dir: Path) -> str:
    """The pip ansible-test bootstraps its venvs with (its python_requirements module)."""
    site = next((bin_dir.parent / "lib").glob("python3*/site-packages"))
    source = (site / "ansible_test/_internal/python_requirements.py").read_text()
    found = re.search(r"pip='(\d+(?:\.\d+)*)'", source)
    if found is None:
        raise SystemExit("sanity: cannot find the pip version ansible-test bootstraps")
    return found[1]


def main() -> int:
    bin_dir = scale.ansible_core_bin()
    home = envs.CACHE / "ansible-test-home"
    stub = home / ".ansible/test/cache" / f"get_pip_{_pip_version(bin_dir).replace('.', '_')}.py"
    stub.parent.mkdir(parents=True, exist_ok=True)
    stub.write_text(GET_PIP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHONPATH"))}
    env |= {"HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}
    python = f"{sys.version_info.major}.{sys.version_info.minor}"  # the ansible-core venv's
    argv = [str(bin_dir / "ansible-test"), "sanity", "--python", python, "--requirements"]
    argv += ["--color", "no", *(a for name in SKIP for a in ("--skip-test", name))]
    return subprocess.run(argv, cwd=COLLECTION, env=env, stdin=subprocess.DEVNULL).returncode


if __name__ == "__main__":
    raise SystemExit(main())
