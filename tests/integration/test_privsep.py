"""Root never runs the environment owner's code, and never acts in the env with more than the
owner's power (patcher/agent/privsep.py).

A real user is created for each test, owning a real venv (`--system-site-packages`, the
host's own interpreter) in its home, and attacks as that user would: a `.pth` file in its
site-packages, a half-written transaction in its journal naming the base interpreter's
dist-packages. The CLI runs as root (`--python` locally, and through a real sshd as root),
as an operator's `sudo vpatch ...` or `--sudo` would.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from patcher.transports.bundle import TRUSTED_PYTHON, agent_argv, agent_bundle, request_line
from tests import envs
from tests import sshd as harness
from tests.conftest import Run, vpatch
from tests.support.owners import HOST_PYTHON, OwnedEnv, base_site_dir, evil_apply, owned_env
from tests.support.sshargs import ssh_args
from tests.support.standin_specs import REL, SPEC_A

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root is the operator here")


@pytest.fixture
def owned(tmp_path: Path) -> Iterator[OwnedEnv]:
    with owned_env(tmp_path) as env:
        yield env


def spec(tmp_path: Path) -> Path:
    p = tmp_path / "a.toml"
    p.write_text(SPEC_A)
    return p


def ok(res: Run) -> Run:
    assert res.code == 0, res.out + res.err
    return res


def test_owner_pth_never_runs_as_root(owned: OwnedEnv, tmp_path: Path) -> None:
    """The agent ran the env's own interpreter as root with `-I`: the owner's .pth ran as
    root at every start, `status` and `diff` included. Now it runs only as the owner (in
    the worker and in the probes): the marker proves the .pth did run, never as uid 0."""
    owned.plant_pth()
    py = owned.python
    ok(vpatch("status", "--python", py))
    ok(vpatch("diff", "servekit", "--python", py))
    applied = ok(vpatch("apply", spec(tmp_path), "--python", py, "--json"))
    assert applied.doc["hosts"][0]["patches"][0]["outcome"] == "applied", applied.out
    ok(vpatch("verify", spec(tmp_path), "--python", py))
    ok(vpatch("rollback", "--python", py))
    assert owned.ran_as() == {owned.uid}, sorted(owned.markers.iterdir())
    # and what the agent wrote is the owner's, written as the owner
    assert {p.stat().st_uid for p in [owned.state, *owned.state.rglob("*")]} == {owned.uid}
    assert (owned.site / REL).stat().st_uid == owned.uid


def test_sha2_in_site_packages_is_never_imported_as_root(owned: OwnedEnv, tmp_path: Path) -> None:
    """On Python 3.11 and older the agent's `from _sha2 import sha256` looked along a
    sys.path that held the owner's site-packages: a `_sha2.py` there ran as root. The agent
    now imports its modules before `site` puts site-packages on sys.path, and as the owner."""
    if (envs.site_packages(owned.venv).parent.name) >= "python3.12":
        pytest.skip("CPython 3.12+ has its own _sha2: no fall-through to test")
    owned.plant_sha2()
    owned.as_owner(owned.python, "-I", "-c", "import _sha2")  # the plant works, as its owner
    assert owned.ran_as() == {owned.uid}
    ok(vpatch("status", "--python", owned.python))
    ok(vpatch("apply", spec(tmp_path), "--python", owned.python, "--level", "static"))
    assert 0 not in owned.ran_as(), sorted(owned.markers.iterdir())


@pytest.mark.parametrize("login", ["root", "sudo"])
def test_owner_pth_never_runs_as_root_over_ssh(
    login: str, owned: OwnedEnv, tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """The same over a real sshd: logged in as root (the remote shell asks `id -u` and
    starts stage 0), or as a user with `--sudo`; the lab host's env (its /root/ml-env) is
    the owner's. The report names the owner's uid, dropped from root's."""
    if login == "root":
        lab, extra = ssh_lab_factory(1, harness.standin_env_factory), []
    else:
        lab = ssh_lab_factory(
            1, harness.standin_env_factory, user=harness.NONROOT_USER, sudoers=True
        )
        extra = ["--sudo"]
    h = lab.hosts[0]
    os.chmod(h.home, 0o755)  # the host's /root: the owner reaches its env below it
    (h.home / "markers").mkdir(mode=0o777)
    os.chmod(h.home / "markers", 0o1777)
    owned.give(h.home / "ml-env")
    owned.plant_pth(envs.site_packages(h.home / "ml-env"), "/root/markers")
    args = ["--host", h.name, *ssh_args(lab, *extra)]
    ok(vpatch("status", *args))
    ok(vpatch("diff", "servekit", *args))
    applied = ok(vpatch("apply", spec(tmp_path), *args, "--json"))
    ok(vpatch("verify", spec(tmp_path), *args))
    assert owned.ran_as(h.home / "markers") == {owned.uid}
    host = applied.doc["hosts"][0]
    assert (host["uid"], host["dropped_from"]) == (owned.uid, 0), host


@pytest.mark.parametrize("copies", [False, True], ids=["same-binary", "copied-binary"])
def test_root_env_with_an_owners_pth_drops_and_still_sees_roots_processes(
    owned: OwnedEnv, copies: bool
) -> None:
    """A root-owned environment needs no drop, so stage 0 becomes its worker (no second
    process: in place when the venv's python is the trusted interpreter's binary, by an
    exec with the bundle in a memfd when it is a copy). Another user's .pth in its
    site-packages makes that worker drop to the user before `site` runs (on a Debian
    interpreter the check missed the venv's own site-packages: the .pth ran as root); the
    restart scan must still see root's processes of the environment (a dropped worker
    cannot read their /proc/PID/exe): the root helper the worker forks before the drop
    answers it, as stage 0 does after a fork. Without the helper the scan finds nothing
    and the root server is never reported as running old code."""
    root_dir = Path(tempfile.mkdtemp(prefix="vpatch-root-env-"))  # reachable by the owner
    os.chmod(root_dir, 0o755)
    venv = root_dir / "venv"
    subprocess.run(
        [HOST_PYTHON, "-m", "venv", "--without-pip", *(["--copies"] if copies else []), str(venv)],
        check=True,
        capture_output=True,
    )
    python, site = venv / "bin" / "python", envs.site_packages(venv)
    target = site / "served.py"
    target.write_text("")
    owned.plant_pth(site)
    assert (site / "zz_owner_marker.pth").stat().st_uid == owned.uid
    serve = f"import sys; sys.path.append({str(site)!r}); import served, time; time.sleep(120)"
    server = subprocess.Popen([str(python), "-I", "-S", "-c", serve])  # imports `served`
    try:
        time.sleep(0.05)
        os.utime(target)  # written after the server started
        argv = agent_argv(str(python), True, TRUSTED_PYTHON)
        req = {"op": "procs", "paths": [str(target)]}
        out = subprocess.run(
            argv, input=agent_bundle() + request_line(req), capture_output=True, timeout=120
        )
        answer = json.loads(out.stdout)
        assert (answer["uid"], answer.get("dropped_from")) == (owned.uid, 0), answer
        assert server.pid in [p["pid"] for p in answer["restart_required"]], answer
        assert owned.ran_as() == {owned.uid}
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(root_dir)


def test_stage0_going_on_as_the_worker_loads_its_own_modules_once(tmp_path: Path) -> None:
    """A root-owned environment of the trusted interpreter's binary: stage 0 becomes the
    worker in its own process (privsep._become_worker), which imports the agent package
    afresh but keeps the modules stage 0 loaded and never changed (privsep, rootscan and
    the closure's two, each loaded once; the package itself and what stage 0 never ran, once
    too), and works as root with that state empty: the inspect is answered, as uid 0."""
    root_dir = Path(tempfile.mkdtemp(prefix="vpatch-root-env-"))
    os.chmod(root_dir, 0o755)
    try:
        venv = root_dir / "venv"
        subprocess.run(
            [HOST_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True
        )
        argv = agent_argv(str(venv / "bin" / "python"), True, TRUSTED_PYTHON)
        at = argv.index("-c") + 1
        # every module the bundle's importer runs, said on stderr as the process ends
        counted = (
            argv[at]
            .replace("        exec(x,mod.__dict__)\n", "        L.append(n);exec(x,mod.__dict__)\n")
            .replace(
                "import sys\n",
                "import sys,os\nL=[];X=os._exit\n"
                "def E(c):\n    os.write(2,('@@'+repr(L)).encode());X(c)\nos._exit=E\n",
                1,
            )
        )
        assert counted.count("L.append(n)") == 1
        argv[at] = counted
        req = {"op": "inspect", "packages": {}, "state_dir": str(root_dir / "state")}
        out = subprocess.run(
            argv, input=agent_bundle() + request_line(req), capture_output=True, timeout=120
        )
        answer = json.loads(out.stdout)
        assert (answer["ok"], answer["uid"], answer.get("dropped_from")) == (True, 0, None)
        loads = out.stderr.decode().rsplit("@@", 1)[1].strip("[]").replace("'", "").split(", ")
        assert "vpatch_agent.facts" in loads
        assert {n: loads.count(n) for n in loads if loads.count(n) > 1} == {}, loads
    finally:
        shutil.rmtree(root_dir)


def test_untrusted_trusted_python_is_refused(owned: OwnedEnv) -> None:
    """--trusted-python naming an interpreter path another user owns (here the owner's own
    bin/python link): stage 0 refuses before it looks at the environment."""
    res = vpatch("status", "--python", owned.python, "--trusted-python", owned.python)
    assert res.code == 1, res.out + res.err
    assert f"is owned by uid {owned.uid}, not root" in res.out + res.err, res.out + res.err
    assert "Traceback" not in res.err


def test_report_names_the_uid_that_did_the_work(owned: OwnedEnv, tmp_path: Path) -> None:
    py = owned.python
    res = ok(vpatch("apply", spec(tmp_path), "--python", py, "--level", "static", "--json"))
    host = res.doc["hosts"][0]
    assert (host["uid"], host["dropped_from"]) == (owned.uid, 0), host
    human = ok(vpatch("status", "--python", owned.python))
    assert f"as uid {owned.uid} (the environment's owner; dropped from root)" in human.out
    # a root-owned env: root does the work itself
    root_env = tmp_path / "rootenv"
    os.system(f"/usr/bin/python3 -m venv --without-pip {root_env}")
    mine = ok(vpatch("status", "--python", root_env / "bin" / "python", "--json"))
    assert (mine.doc["hosts"][0]["uid"], mine.doc["hosts"][0]["dropped_from"]) == (0, None)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _half_written(owned: OwnedEnv, created: Path, deleted: Path, payload: bytes) -> None:
    """The owner's journal: a transaction without its marker that 'wrote' two files of the
    base interpreter's dist-packages (one it 'deleted', one it 'created') and one of its own
    that it did not reach, so the repair would put the first two back: `created` from a
    backup holding the owner's bytes, `deleted` removed."""
    own = owned.site / REL
    owned.as_owner("mkdir", "-p", "-m700", owned.state / "backups")
    owned.write_as_owner(owned.state / "backups" / sha(payload), payload)

    lines = [
        dict(
            evil_apply(created, sha(payload), None), txn="t-evil"
        ),  # 'deleted' by the txn: the repair recreates it
        dict(
            evil_apply(deleted, None, sha(deleted.read_bytes())), txn="t-evil"
        ),  # 'created' by it: repair removes it
        dict(
            evil_apply(own, sha(own.read_bytes()), "1" * 64), txn="t-evil"
        ),  # not reached: the txn is half-written
    ]
    text = "".join(json.dumps(e) + "\n" for e in lines)
    owned.write_as_owner(owned.state / "journal.jsonl", text.encode())


def test_repair_never_reaches_the_base_interpreters_dist_packages(owned: OwnedEnv) -> None:
    """`vpatch status` as root repaired the owner's planted transaction into root's
    dist-packages (site.getsitepackages() of a --system-site-packages venv has them): it
    created a module there with the owner's bytes and deleted root's, and said `status: ok`.
    Now the confined dirs are the env's own, the worker has only the owner's rights, and the
    human output says which entries were refused."""
    base = base_site_dir()
    tag = secrets.token_hex(4)
    created, deleted = base / f"vpatch_evil_{tag}.py", base / f"vpatch_victim_{tag}.py"
    deleted.write_text("root = True\n")
    payload = b"import os; os.system('id > /tmp/owned')\n"
    listing = sorted(p.name for p in base.iterdir())
    try:
        _half_written(owned, created, deleted, payload)
        res = vpatch("status", "--python", owned.python)
        assert not created.exists(), "the repair created a module in root's dist-packages"
        assert deleted.read_text() == "root = True\n"
        assert sorted(p.name for p in base.iterdir()) == listing
        for path in (created, deleted):
            assert f"journal entry for {path} ignored" in res.out, res.out + res.err
        assert "outside this environment's site-packages" in res.out
        doc = vpatch("status", "--python", owned.python, "--json").doc
        assert not created.exists() and deleted.exists()
        assert any(str(created) in w for w in doc["hosts"][0]["warnings"]), doc
    finally:
        created.unlink(missing_ok=True)
        deleted.unlink(missing_ok=True)
