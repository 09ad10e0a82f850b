"""What vpatch leaves on a host is private and owned like the environment it belongs to.

The journal names every file vpatch changed and the backups hold their original bytes: 0600
files in 0700 dirs, whatever the umask. And when root (sudo) patches an environment some user
owns, the state, the patched file and its fresh .pyc stay that user's: otherwise the next
`vpatch status` without sudo, or the user's own pip, would trip over root-owned files.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import sshd as harness
from tests.conftest import REPO, VPATCH, Env, vpatch
from tests.support.sshargs import host_file, ssh_args
from tests.support.standin_specs import REL, SPEC_A

NOBODY = 65534


def modes(state: Path) -> dict[str, tuple[int, int, int]]:
    """relative path -> (permission bits, uid, gid) for the state dir and everything in it."""
    out = {}
    for p in [state, *sorted(state.rglob("*"))]:
        st = p.lstat()
        out[str(p.relative_to(state.parent))] = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    return out


def expect(state: Path, uid: int, gid: int) -> dict[str, tuple[int, int, int]]:
    name = state.name
    want = {
        name: (0o700, uid, gid),
        f"{name}/backups": (0o700, uid, gid),
        f"{name}/journal.jsonl": (0o600, uid, gid),
        f"{name}/lock": (0o600, uid, gid),
    }
    for b in (state / "backups").iterdir():
        want[f"{name}/backups/{b.name}"] = (0o600, uid, gid)
    return want


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_state_is_private_whatever_the_umask(tmp_path: Path, standin_env: Env, umask: int) -> None:
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    target = standin_env.file(REL)
    os.chmod(target, 0o640)
    proc = subprocess.run(
        [*VPATCH, "apply", str(spec), "--python", str(standin_env.python), "--level", "static"],
        cwd=REPO,
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.umask(umask),  # the runner is single-threaded
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    state = standin_env.root / ".vpatch"
    assert len(list((state / "backups").iterdir())) == 1
    assert modes(state) == expect(state, os.getuid(), os.getgid())
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the patched file keeps its mode


def test_root_patching_a_users_env_leaves_it_the_users(tmp_path: Path, standin_env: Env) -> None:
    """As root (what --sudo does), on an env owned by `nobody`: state, patched file, .pyc and
    a custom --state-dir all end up owned by the env's owner."""
    if os.geteuid() != 0:
        pytest.skip("needs root to own files as another user")
    for p in [standin_env.root, *standin_env.root.rglob("*")]:
        os.lchown(p, NOBODY, NOBODY)
    # root works as the env's owner there (agent/privsep.py): the owner must reach its env
    for d in (standin_env.root, *standin_env.root.parents):
        if d.is_relative_to(Path(tempfile.gettempdir())) and d.stat().st_uid == 0:
            os.chmod(d, d.stat().st_mode | 0o055)
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    py = ["--python", str(standin_env.python)]
    assert vpatch("apply", spec, *py).code == 0  # level full: the probe imports it too
    state = standin_env.root / ".vpatch"
    assert modes(state) == expect(state, NOBODY, NOBODY)
    target = standin_env.file(REL)
    pycache = target.parent / "__pycache__"
    for p in (target, pycache, *pycache.iterdir()):
        assert (p.stat().st_uid, p.stat().st_gid) == (NOBODY, NOBODY), p
    assert vpatch("rollback", *py).code == 0
    owned = tmp_path / "owned"  # a --state-dir is made as the owner too: somewhere it may
    owned.mkdir()
    os.chown(owned, NOBODY, NOBODY)
    custom = owned / "custom-state"
    assert vpatch("apply", spec, *py, "--state-dir", custom).code == 0
    assert modes(custom) == expect(custom, NOBODY, NOBODY)


def test_sudo_lab_state_is_roots_and_private(
    tmp_path: Path, ssh_lab_factory: harness.LabFactory
) -> None:
    """A root-owned env patched by a non-root login through sudo: root's 0600/0700 state, and
    the login user alone can neither read the journal nor patch (it is told to use --sudo)."""
    spec = tmp_path / "a.toml"
    spec.write_text(SPEC_A)
    lab = ssh_lab_factory(1, harness.standin_env_factory, user=harness.NONROOT_USER, sudoers=True)
    h = lab.hosts[0]
    ok = vpatch("apply", spec, "--host", h.name, *ssh_args(lab, "--sudo", "--json"))
    assert ok.code == 0, ok.out + ok.err
    state = h.home / "ml-env" / ".vpatch"
    assert modes(state) == expect(state, 0, 0)
    target = host_file(h, REL)
    assert (target.stat().st_uid, stat.S_IMODE(target.stat().st_mode)) == (0, 0o644)
    plain = vpatch("status", "--host", h.name, *ssh_args(lab))
    assert plain.code == 1, plain.out + plain.err
    assert "Permission denied" in plain.err and "--sudo" in plain.err
    st = vpatch("status", "--host", h.name, *ssh_args(lab, "--sudo", "--json"))
    assert st.code == 0 and [p["outcome"] for p in st.doc["hosts"][0]["patches"]] == ["applied"]
