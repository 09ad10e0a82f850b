"""The closure enforced where code is opened (patcher/agent/closure.py's `GUARD`, in root
probes and the root worker's `site`): root refuses to open any code file another user could
write, a module deep inside a dependency included, which the closure's walk (top entries of
the packages) does not see.

The attack: in a root-owned venv, the spec's package (root's) imports a dependency whose
package directory is root's but one module of it is a user's (`click/globals.py` under a
package that does `import click`). The plain mechanism, a root interpreter importing the
package as apply's import check did, runs the user's module as uid 0; vpatch's import check
now refuses it, naming the file, and the write it guarded is put back.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import envs, standin
from tests.conftest import vpatch
from tests.support.owners import HOST_PYTHON, User, a_user, root_venv
from tests.support.standin_specs import REL, SPEC_A

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root is the operator here")


@pytest.fixture
def user() -> Iterator[User]:
    with a_user() as u:
        yield u


def test_a_users_module_deep_in_a_dependency_is_not_run_as_root(user: User, tmp_path: Path) -> None:
    with root_venv() as venv:
        python = venv / "bin" / "python"
        whl = standin.build_wheel(tmp_path)
        pip = [HOST_PYTHON, "-m", "pip", "-q", "--python", str(python), "install"]
        subprocess.run([*pip, "--no-deps", "--no-index", str(whl)], check=True, capture_output=True)
        site = envs.site_packages(venv)
        dep = site / "helperdep"
        dep.mkdir(mode=0o755)
        (dep / "__init__.py").write_text("from . import deep\n")
        deep = dep / "deep.py"
        deep.write_text(user.marker_code())
        os.chown(deep, user.uid, user.gid)  # one file of a root package: the user's
        init = site / "servekit" / "__init__.py"
        init.write_text(init.read_text() + "import helperdep\n")

        # the plain mechanism: a root interpreter importing the package runs the user's file
        subprocess.run([python, "-I", "-c", "import servekit"], check=True)
        assert user.ran_as() == {0}
        for marker in user.markers.iterdir():
            marker.unlink()

        # vpatch: the import check as root refuses the file; nothing of it ran; put back
        spec = tmp_path / "a.toml"
        spec.write_text(SPEC_A)
        target = site / REL
        pristine = target.read_bytes()
        res = vpatch("apply", spec, "--python", python)
        said = res.out + res.err
        assert res.code != 0, said
        assert f"vpatch: {deep} is owned by uid {user.uid}; refused to run it as root" in said
        assert user.ran_as() == set(), sorted(user.markers.iterdir())
        assert target.read_bytes() == pristine

        # root's file again: the import check passes (the guard refuses only what it must)
        os.chown(deep, 0, 0)
        ok = vpatch("apply", spec, "--python", python)
        assert ok.code == 0, ok.out + ok.err
        assert user.ran_as() == {0}  # root's own file, run by root: as it should


def test_a_root_pth_importing_a_users_submodule_is_refused_not_run(user: User) -> None:
    """A root `.pth` that imports a submodule (`import click.globals`) of a root package
    whose one module is a user's: the walk sees root's `.pth` and root's package entry, and
    a read-only `vpatch status` ran the user's module as uid 0 in the root worker's `site`.
    Now `site` runs under the guard: the module is refused, and so is the status, naming it."""
    with root_venv() as venv:
        python = venv / "bin" / "python"
        site = envs.site_packages(venv)
        dep = site / "helperdep"
        dep.mkdir(mode=0o755)
        (dep / "__init__.py").write_text("")
        deep = dep / "deep.py"
        deep.write_text(user.marker_code())
        os.chown(deep, user.uid, user.gid)
        (site / "zz_helper.pth").write_text("import helperdep.deep\n")

        # the plain mechanism: root's interpreter starting runs it, as uid 0
        subprocess.run([python, "-I", "-c", "pass"], check=True)
        assert user.ran_as() == {0}
        for marker in user.markers.iterdir():
            marker.unlink()

        res = vpatch("status", "--python", python)
        said = res.out + res.err
        assert res.code == 1, said
        assert f"vpatch: {deep} is owned by uid {user.uid}; refused to run it as root" in said
        assert "Traceback" not in said
        assert user.ran_as() == set(), sorted(user.markers.iterdir())

        os.chown(deep, 0, 0)  # root's own: status runs, and so does the .pth, as root
        assert vpatch("status", "--python", python).code == 0
        assert user.ran_as() == {0}
