"""The trust closure (patcher/agent/closure.py, closurefacts.py, privsep.py, relay.py): no code
another user can write runs as root, and the operator's restart runs as the operator.

Each test is one attack of issue 37, tried as the attacker would: a real user created by the
test, real files it owns (or a root file an ACL gives it), a real root-owned venv of the host's
interpreter in a 0755 directory, and the real CLI or agent run as root, as `sudo vpatch ...`
would. The planted code records the uid of every interpreter that ran it; each test failed on
the main branch before the closure (the code ran as uid 0) and passes now.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from patcher.transports.bundle import TRUSTED_PYTHON, agent_argv, agent_bundle, request_line
from tests import envs, standin
from tests import sshd as harness
from tests.conftest import Run, vpatch
from tests.support.owners import HOST_PYTHON, User, a_user, root_venv
from tests.support.sshargs import ssh_args
from tests.support.standin_specs import SPEC_A

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root is the operator here")


@pytest.fixture
def user() -> Iterator[User]:
    with a_user() as u:
        yield u


def ok(res: Run) -> Run:
    assert res.code == 0, res.out + res.err
    return res


def own(user: User, *paths: Path) -> None:
    for top in paths:
        for p in [top, *top.rglob("*")] if top.is_dir() and not top.is_symlink() else [top]:
            os.lchown(p, user.uid, user.gid)


def status_uid(python: Path) -> dict[str, object]:
    host: dict[str, object] = ok(vpatch("status", "--python", python, "--json")).doc["hosts"][0]
    return host


def test_a_pth_path_line_to_a_users_checkout_runs_only_as_that_user(user: User) -> None:
    """Attack 2: a root venv's root-owned editable `.pth` names a user's checkout. `site`
    puts it on sys.path, and a bare import that falls through to it ran the user's module as
    root at `site.main()` of root's worker: Debian's stdlib `sitecustomize` imports
    `apport_python_hook`; an interpreter without one imports the user's `sitecustomize`.
    Now the checkout is in the closure: the worker drops to the user before `site` runs."""
    src = user.home / "src"
    src.mkdir()
    for name in ("apport_python_hook.py", "sitecustomize.py"):
        (src / name).write_text(user.marker_code())
    own(user, src)
    with root_venv() as venv:
        site = envs.site_packages(venv)
        (site / "__editable__.demo-1.0.pth").write_text(f"{src}\n")
        host = status_uid(venv / "bin" / "python")
        assert user.ran_as() == {user.uid}, sorted(user.markers.iterdir())
        assert (host["uid"], host["dropped_from"]) == (user.uid, 0), host


def test_an_acl_that_lets_a_user_write_a_root_pth_drops_to_that_user(user: User) -> None:
    """Attack 4: a root-owned 0644-looking `.pth` that `setfacl -m u:USER:rw` lets USER edit
    read as closed (the mode bits only; with an ACL the group bits are its mask), so USER's
    edit ran as root. Now the ACL's entries count: USER can write it, so it runs as USER."""
    with root_venv() as venv:
        pth = envs.site_packages(venv) / "zz_acl.pth"
        pth.write_text(user.marker_code())
        os.chmod(pth, 0o644)
        subprocess.run(["setfacl", "-m", f"u:{user.name}:rw", str(pth)], check=True)
        # the ACL is real: the user may write the file (no mode bit says so)
        subprocess.run(["sh", "-c", f"test -w {pth}"], user=user.uid, check=True)
        assert pth.stat().st_uid == 0 and not pth.stat().st_mode & 0o002
        host = status_uid(venv / "bin" / "python")
        assert user.ran_as() == {user.uid}, sorted(user.markers.iterdir())
        assert host["uid"] == user.uid, host
        # and an ACL that another user, too, may write it is refused, naming both
        with a_user() as other:
            subprocess.run(["setfacl", "-m", f"u:{other.name}:rw", str(pth)], check=True)
            res = vpatch("status", "--python", venv / "bin" / "python")
            assert res.code == 1, res.out + res.err
            said = res.out + res.err
            assert f"uid {user.uid}: {pth}" in said and f"uid {other.uid}: {pth}" in said, said
            assert "--run-as" in said and "Traceback" not in said
            assert user.ran_as() == {user.uid}  # (the planted code records in user's dir)
            # the operator's explicit choice runs it as that user
            ok(vpatch("status", "--python", venv / "bin" / "python", "--run-as", other.name))
            assert user.ran_as() == {user.uid, other.uid}


def test_a_package_dir_another_user_owns_is_imported_only_as_that_user(
    user: User, tmp_path: Path
) -> None:
    """Attack 5: a service user owns `site-packages/servekit` inside a root-owned venv. A
    static command reads it as data (the worker stays root, nothing of it imported); apply's
    import check imported it as root. Now the probe that imports it runs as its owner."""
    with root_venv() as venv:
        python = venv / "bin" / "python"
        whl = standin.build_wheel(tmp_path)
        pip = [HOST_PYTHON, "-m", "pip", "-q", "--python", str(python), "install"]
        subprocess.run([*pip, "--no-deps", "--no-index", str(whl)], check=True, capture_output=True)
        pkg = envs.site_packages(venv) / "servekit"
        init = pkg / "__init__.py"
        init.write_text(init.read_text() + user.marker_code())
        own(user, pkg)
        host = status_uid(python)
        assert host["uid"] == 0 and user.ran_as() == set(), host  # static: read, never run
        spec = tmp_path / "a.toml"
        spec.write_text(SPEC_A)
        ok(vpatch("apply", spec, "--python", python))
        assert user.ran_as() == {user.uid}, sorted(user.markers.iterdir())
        ok(vpatch("rollback", "--python", python))
        # a second user who can write a file of the package: the import check runs as
        # neither, refused with both named (and the write it guarded is put back)
        with a_user() as other:
            os.lchown(pkg / "config.py", other.uid, other.gid)
            before, pristine = user.ran_as(), (pkg / "config.py").read_bytes()
            res = vpatch("apply", spec, "--python", python)
            said = res.out + res.err
            assert res.code != 0 and "more than one user" in said, said
            assert f"uid {user.uid}" in said and f"uid {other.uid}" in said, said
            assert user.ran_as() == before, sorted(user.markers.iterdir())
            assert (pkg / "config.py").read_bytes() == pristine


def test_a_copies_venv_of_a_users_python_runs_as_that_user(user: User) -> None:
    """Attack 6: a `--copies` venv (root-owned copy of the binary, root-owned pyvenv.cfg)
    whose `home` is a user's Python: stage 0 saw root's files only and exec'd an interpreter
    whose standard library (`encodings/`, run at its very start) the user owns. Now `home`
    and the standard library it leads to are in the closure: the worker is the user's."""
    py = user.home / "py"
    lib = py / "lib" / "python3.11"
    (py / "bin").mkdir(parents=True)
    lib.mkdir(parents=True)
    shutil.copy2(os.path.realpath(HOST_PYTHON), py / "bin" / "python3.11")
    real_lib = Path(os.path.dirname(os.path.realpath(HOST_PYTHON))).parent / "lib" / "python3.11"
    for entry in real_lib.iterdir():
        if entry.name not in ("encodings", "site-packages", "dist-packages"):
            (lib / entry.name).symlink_to(entry)
    shutil.copytree(real_lib / "encodings", lib / "encodings")
    name = repr(str(user.markers / "ran-as-%d-%d"))  # (`open` is not there yet: posix's)
    mark = (
        f"import posix; posix.close(posix.open({name} % (posix.geteuid(), posix.getpid()),"
        " posix.O_CREAT | posix.O_WRONLY, 0o644))\n"
    )
    with (lib / "encodings" / "__init__.py").open("a") as fh:
        fh.write(mark)
    own(user, py)
    with root_venv("--copies") as venv:
        cfg = venv / "pyvenv.cfg"
        text = cfg.read_text().splitlines()
        cfg.write_text("".join(f"home = {py / 'bin'}\n" if ln.startswith("home") else ln + "\n"
                               for ln in text))  # fmt: skip
        assert (venv / "bin" / "python").stat().st_uid == 0 and cfg.stat().st_uid == 0
        host = status_uid(venv / "bin" / "python")
        assert user.ran_as() == {user.uid}, sorted(user.markers.iterdir())
        assert (host["uid"], host["dropped_from"]) == (user.uid, 0), host


@pytest.mark.parametrize("where", ["owners-env", "root-env-owners-pth"])
def test_restart_and_health_run_as_the_operator(user: User, where: str) -> None:
    """Attack 11: the rollout's restart command ran as the dropped environment owner (so
    `systemctl restart` failed, and the owner decided what "restarted" meant). Now the root
    side above the worker (stage 0, or the helper a worker forks before it drops in
    `settle`) answers the operator's ops itself: `id -u` says 0, while the worker that
    answers everything else is the owner's."""
    with root_venv() as venv:
        if where == "owners-env":
            own(user, venv)
        else:
            pth = envs.site_packages(venv) / "zz_owner.pth"
            pth.write_text(user.marker_code())
            own(user, pth)
        argv = agent_argv(str(venv / "bin" / "python"), True, TRUSTED_PYTHON)
        reqs = [
            {"op": "procs", "paths": []},
            {"op": "restart", "command": "id -u", "timeout": 30},
            {"op": "health", "url": "http://127.0.0.1:9/health", "wait": 0},
            {"op": "procs", "paths": []},
        ]
        out = subprocess.run(
            argv,
            input=agent_bundle() + b"".join(request_line(r) for r in reqs),
            capture_output=True,
            timeout=120,
        )
        answers = [json.loads(line) for line in out.stdout.splitlines()]
        assert len(answers) == 4, out
        first, restarted, health, last = answers
        assert (first["uid"], last["uid"]) == (user.uid, user.uid), answers
        assert restarted["ok"] and restarted["stdout"].strip() == "0", restarted
        assert health["ok"] and health["uid"] == 0 and health["healthy"] is False, health


def test_run_as_without_root_is_refused_not_ignored(user: User) -> None:
    """An agent that is not root (the plain start, as the login user) cannot become the
    --run-as user: every request is answered with why, rather than the step running as the
    login user while the operator believes otherwise. Naming the login user itself is fine."""
    with root_venv() as venv:
        own(user, venv)
        python = str(venv / "bin" / "python")
        line = agent_bundle() + request_line({"op": "procs", "paths": []})
        for name, refused in (("root", True), (user.name, False)):
            argv = agent_argv(python, False, TRUSTED_PYTHON, name)
            out = subprocess.run(
                argv, input=line, capture_output=True, timeout=120, user=user.uid, cwd="/"
            )
            answer = json.loads(out.stdout)
            assert answer["uid"] == user.uid, answer
            if refused:
                assert answer["kind"] == "privsep", answer
                assert f"runs as uid {user.uid}, not root" in answer["error"], answer
            else:
                assert answer["ok"], answer


def test_rollouts_restart_runs_as_the_operator_over_ssh(
    user: User, tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """Attack 11 through the real CLI and a real sshd: `vpatch rollout --sudo` onto an
    environment the user owns. The apply is the owner's (the worker dropped); the restart
    command is root's, the operator's through sudo (it ran as the owner before)."""
    lab = ssh_lab_factory(1, harness.standin_env_factory, user=harness.NONROOT_USER, sudoers=True)
    h = lab.hosts[0]
    os.chmod(h.home, 0o755)  # the host's /root: the owner reaches its env below it
    (h.home / "markers").mkdir(mode=0o777)
    os.chmod(h.home / "markers", 0o1777)
    own(user, h.home / "ml-env")
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    res = vpatch(
        "rollout",
        spec,
        "--host",
        h.name,
        *ssh_args(lab, "--sudo"),
        "--restart",
        "id -u > /root/markers/restarted-as",
        "--json",
    )
    assert res.code == 0, res.out + res.err
    assert (h.home / "markers" / "restarted-as").read_text().strip() == "0"
    state = h.home / "ml-env" / ".vpatch"  # the apply and the step entries: the owner's
    assert {p.stat().st_uid for p in [state, *state.rglob("*")]} == {user.uid}
