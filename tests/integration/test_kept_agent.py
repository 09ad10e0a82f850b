"""The agent's code kept on the host between runs, over real sshd hosts (bundle.kept_boot).

The SSH transports send the bundle's sha256 with the boot; the host loads the bundle from its
login user's cache directory, and is sent it only on a miss, which it then keeps. Each test
reads the facts: whether the controller sent the bundle (`bundles_sent`, and the agent's own
words for the miss), the kept file's bytes, owner and mode, and a marker that a planted
bundle's modules write if anything ever ran them. As root (a root login, `--sudo`) the loader
is privsep's stage 0, under the trusted interpreter, in root's own home.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from patcher.transports.base import SessionTransport
from patcher.transports.bundle import agent_bundle
from patcher.transports.openssh import OpenSshTransport
from patcher.transports.paramiko_ssh import SshTransport
from patcher.transports.ssh import SshOptions
from tests import sshd as harness
from tests.conftest import vpatch
from tests.support.keptagent import code_file, kept_dir, kept_file, planted_bundle
from tests.support.sshargs import ssh_args

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab's hosts log in as root")

PY = "/root/ml-env/bin/python"
INSPECT: dict[str, Any] = {"op": "inspect", "packages": {}}
STRANGER = 65534  # nobody: a user who is neither root nor the login user


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.SshLab]:
    """One host logged in as root: the loader is stage 0, the cache root's."""
    lab = harness.start_lab(1, tmp_path_factory.mktemp("kept") / "lab", _env)
    yield lab
    lab.close()


def _env(host: harness.SshHost) -> None:
    harness.standin_env_factory(host)
    os.chmod(host.home, 0o755)  # a typical /root: no one else writes it


@pytest.fixture
def host(lab: harness.SshLab) -> harness.SshHost:
    h = lab.hosts[0]
    shutil.rmtree(h.home / ".cache", ignore_errors=True)
    for m in h.home.glob("planted-*"):
        m.unlink()
    return h


def session(
    lab: harness.SshLab,
    h: harness.SshHost,
    kind: type[SessionTransport] = OpenSshTransport,
    **kw: Any,
) -> Callable[[], SessionTransport]:
    opts = SshOptions(python=PY, ssh_config=str(lab.ssh_config), connect_timeout=10, **kw)

    def make() -> SessionTransport:
        return kind(h.name, h.name, None, None, opts)  # type: ignore[call-arg]

    return make


def one_run(make: Callable[[], SessionTransport], early: bool = False) -> SessionTransport:
    """One session: two requests (the first on a fresh agent), then EOF."""
    t = make()
    try:
        if early and isinstance(t, OpenSshTransport):
            t.start()
        first, second = t.call(INSPECT), t.call(INSPECT)
        assert first["ok"] and second["ok"], (first, second)
        assert first["pid"] == second["pid"]  # one agent answered both
    finally:
        t.close()
    return t


@pytest.mark.parametrize("kind", [OpenSshTransport, SshTransport], ids=["openssh", "paramiko"])
def test_second_run_loads_the_kept_bundle(
    lab: harness.SshLab, host: harness.SshHost, kind: type[SessionTransport]
) -> None:
    """The first session of a host is sent the bundle and keeps it (root's file, 0600, in a
    0700 directory of root's); every later one, early-started or not, is sent none."""
    make = session(lab, host, kind)
    first = one_run(make)
    assert (first.bundles_sent, first.kept_miss) == (1, "no kept bundle")
    kept = kept_file(host.home)
    assert kept.read_bytes() == agent_bundle()
    st, dst = kept.stat(), kept.parent.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode), st.st_nlink) == (0, 0o600, 1)
    assert (dst.st_uid, stat.S_IMODE(dst.st_mode)) == (0, 0o700)
    for early in (False, True):
        again = one_run(make, early)
        assert (again.bundles_sent, again.kept_miss) == (0, ""), early
    assert kept.stat().st_ino == st.st_ino  # read, never rewritten


def test_tampered_entry_is_refused_never_run_and_replaced(
    lab: harness.SshLab, host: harness.SshHost
) -> None:
    """Root's own file under the bundle's name, but other bytes (a planted agent that marks
    every module it runs): the hash says no, the bundle is sent, the entry is the real one
    again, and nothing of the planted code ran."""
    kept = kept_file(host.home)
    kept.parent.mkdir(parents=True, mode=0o700)
    os.chmod(kept.parent.parent, 0o700)
    os.chmod(kept.parent.parent.parent, 0o700)
    kept.write_bytes(planted_bundle("/root/planted-ran"))
    os.chmod(kept, 0o600)
    t = one_run(session(lab, host))
    assert (t.bundles_sent, t.kept_miss) == (1, "the kept bundle is not the one asked for")
    assert not (host.home / "planted-ran").exists()
    assert kept.read_bytes() == agent_bundle()
    assert one_run(session(lab, host)).bundles_sent == 0


def _foreign_file(kept: Path) -> None:
    os.chown(kept, STRANGER, STRANGER)


def _open_file(kept: Path) -> None:
    os.chmod(kept, 0o666)


def _linked_file(kept: Path) -> None:
    os.link(kept, kept.parent.parent / "another-name")


def _symlinked_file(kept: Path) -> None:
    elsewhere = kept.parent.parent / "elsewhere.bundle"
    os.replace(kept, elsewhere)
    kept.symlink_to(elsewhere)


def _open_dir(kept: Path) -> None:
    os.chmod(kept.parent, 0o777)


def _readable_dir(kept: Path) -> None:
    os.chmod(kept.parent, 0o755)


def _foreign_dir(kept: Path) -> None:
    os.chown(kept.parent, STRANGER, STRANGER)


def _foreign_parent(kept: Path) -> None:
    os.chown(kept.parent.parent, STRANGER, STRANGER)


CASES = {
    "foreign-file": (_foreign_file, "the kept bundle is not a file of this user only", True),
    "open-file": (_open_file, "the kept bundle is not a file of this user only", True),
    "hard-link": (_linked_file, "the kept bundle is not a file of this user only", True),
    "symlink": (_symlinked_file, "kept bundle: Too many levels of symbolic links", True),
    "open-dir": (_open_dir, "/root/.cache/vpatch/agent is writable by others", False),
    "readable-dir": (_readable_dir, "/root/.cache/vpatch/agent is not closed to others", False),
    "foreign-dir": (_foreign_dir, "/root/.cache/vpatch/agent is owned by uid 65534", False),
    "foreign-parent": (_foreign_parent, "/root/.cache/vpatch is owned by uid 65534", False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_owner_mode_or_link_is_refused(
    lab: harness.SshLab, host: harness.SshHost, case: str
) -> None:
    """The right bytes under the right name, but a file or directory that someone else owns
    or may write, a second link, a symlink: never used (the agent says why and is sent the
    bundle). A bad file is replaced by a good one; a directory that is not closed to others
    is never written into."""
    make = session(lab, host)
    assert one_run(make).bundles_sent == 1
    kept = kept_file(host.home)
    spoil, why, replaced = CASES[case]
    spoil(kept)
    t = one_run(make)
    assert (t.bundles_sent, t.kept_miss) == (1, why)
    st = os.stat(kept, follow_symlinks=False)
    if replaced:
        assert (st.st_uid, stat.S_IMODE(st.st_mode), st.st_nlink) == (0, 0o600, 1)
        assert stat.S_ISREG(st.st_mode) and kept.read_bytes() == agent_bundle()
        assert one_run(make).bundles_sent == 0
    else:
        assert one_run(make).bundles_sent == 1  # still refused: nothing kept there


def test_root_never_loads_a_bundle_the_login_user_kept(
    ssh_lab_factory: harness.LabFactory,
) -> None:
    """`--sudo`: the login user's own session keeps the bundle in that user's home; a root
    session (stage 0) looks only in root's home, so it is sent the bundle even though a valid
    copy lies in the user's, and a planted one there never runs as root."""
    lab = ssh_lab_factory(1, _env, user=harness.NONROOT_USER, sudoers=True)
    h = lab.hosts[0]
    user = one_run(session(lab, h))
    assert user.bundles_sent == 1 and kept_file(h.user_home).read_bytes() == agent_bundle()
    assert os.stat(kept_file(h.user_home)).st_uid != 0
    assert one_run(session(lab, h)).bundles_sent == 0
    root = one_run(session(lab, h, sudo=True))
    assert (root.bundles_sent, root.kept_miss) == (1, "no kept bundle")
    assert os.stat(kept_file(h.home)).st_uid == 0
    # the user plants an agent under the name in its own cache: its own sessions refuse it
    # (the hash), root never looks there
    kept_file(h.user_home).write_bytes(planted_bundle(f"{harness.NONROOT_HOME}/planted-ran"))
    assert one_run(session(lab, h, sudo=True)).bundles_sent == 0
    assert one_run(session(lab, h)).bundles_sent == 1
    assert kept_file(h.user_home).read_bytes() == agent_bundle()
    assert not (h.user_home / "planted-ran").exists()


def test_apply_twice_over_ssh_sends_the_bundle_once(
    lab: harness.SshLab, host: harness.SshHost, tmp_path: Path
) -> None:
    """The CLI end to end: `vpatch status` keeps the bundle on the host; a second command
    reads it (the entry is the one the first wrote, never rewritten)."""
    args = ["--host", host.name, *ssh_args(lab)]
    first = vpatch("status", *args)
    assert first.code == 0, first.out + first.err
    kept = kept_file(host.home)
    ino = kept.stat().st_ino
    again = vpatch("status", *args)
    assert again.code == 0, again.out + again.err
    assert kept.stat().st_ino == ino
    assert kept_dir(host.home).is_dir()


@pytest.mark.parametrize("kind", [OpenSshTransport, SshTransport], ids=["openssh", "paramiko"])
def test_keep_agent_off_sends_the_bundle_every_time_and_writes_nothing(
    lab: harness.SshLab, host: harness.SshHost, kind: type[SessionTransport]
) -> None:
    """`keep_agent=False` (`--no-keep-agent`): every session is sent the bundle whole, no
    miss is asked about, and nothing is made under the login user's home; a copy kept by an
    earlier run is neither read nor touched."""
    make = session(lab, host, kind, keep_agent=False)
    for _ in range(2):
        t = one_run(make)
        assert (t.bundles_sent, t.kept_miss) == (1, ""), kind
    assert not (host.home / ".cache").exists()
    one_run(session(lab, host, kind))  # a kept copy, as a run without the option leaves
    kept = kept_file(host.home)
    before = (kept.stat().st_ino, kept.stat().st_mtime_ns)
    assert one_run(make).bundles_sent == 1
    assert (kept.stat().st_ino, kept.stat().st_mtime_ns) == before


def test_no_keep_agent_option_leaves_the_host_s_home_alone(
    lab: harness.SshLab, host: harness.SshHost
) -> None:
    """The CLI end to end: `vpatch status --no-keep-agent` answers and makes no cache dir."""
    res = vpatch("status", "--host", host.name, *ssh_args(lab), "--no-keep-agent")
    assert res.code == 0, res.out + res.err
    assert not (host.home / ".cache").exists()
    plain = vpatch("status", "--host", host.name, *ssh_args(lab))
    assert plain.code == 0 and kept_dir(host.home).is_dir(), plain.out + plain.err


OTHER = "3.12"  # an interpreter whose bytecode magic is not the controller's


@pytest.mark.parametrize("login", ["root", "root-worker", "user"])
def test_other_magic_compiles_once_and_keeps_the_code(
    ssh_lab_factory: harness.LabFactory, login: str
) -> None:
    """A host whose interpreter has another bytecode magic than the controller's cannot use
    the bundle's code objects: it compiled every module it imported, on every start. Now it
    compiles them once, keeps them beside the bundle (its user's file, 0600, a digest of its
    bytes first) and loads them on later starts; a changed or foreign file is compiled anew
    and replaced, never loaded. As root it is stage 0 under a trusted interpreter of that
    version (--trusted-python), or the worker stage 0 starts for a root-owned venv of that
    version (CHILD_BOOT, root's directory); as a user, the environment's interpreter itself."""
    import importlib.util
    import subprocess

    from tests import pythons

    other = Path(pythons.find(OTHER)).resolve()
    prefix = other.parent.parent
    if not str(prefix).startswith("/root/"):
        pytest.skip(f"Python {OTHER} here is not under /root, where a lab host can see it")
    if login == "root":
        lab = ssh_lab_factory(1, _env)
        h = lab.hosts[0]
        make = session(lab, h, trusted_python=str(other))
    elif login == "root-worker":
        lab = ssh_lab_factory(1, _env)
        h = lab.hosts[0]
        # a root-owned venv of that version: its pyvenv.cfg names the interpreter's real
        # path, which the host sees at the same place (below)
        venv = [str(other), "-I", "-m", "venv", "--without-pip", str(h.home / "env-other")]
        subprocess.run(venv, check=True)
        make = _with_python(lab, h, "/root/env-other/bin/python")
    else:
        lab = ssh_lab_factory(1, _env, user=harness.NONROOT_USER)
        h = lab.hosts[0]
        make = _with_python(lab, h, str(other))
    seen = h.home / prefix.relative_to("/root")  # the host's /root is h.home
    seen.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(prefix), str(seen)], check=True)
    home = h.home if login == "root" else h.user_home
    magic = subprocess.run(
        [str(other), "-I", "-c", "import importlib.util as u; print(u.MAGIC_NUMBER.hex())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert magic != importlib.util.MAGIC_NUMBER.hex()
    code = code_file(home, bytes.fromhex(magic))
    first = one_run(make)
    assert first.bundles_sent == 1
    st = code.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode), st.st_nlink) == (
        0 if login == "root" else os.stat(h.user_home).st_uid,
        0o600,
        1,
    )
    assert one_run(make).bundles_sent == 0
    assert code.stat().st_ino == st.st_ino  # loaded, not compiled and written again
    data = bytearray(code.read_bytes())
    data[-1] ^= 1  # a changed byte: its digest no longer holds
    code.write_bytes(bytes(data))
    assert one_run(make).bundles_sent == 0
    again = code.stat()
    assert again.st_ino != st.st_ino and code.read_bytes() != bytes(data)
    os.chown(code, STRANGER, STRANGER)  # someone else's: never loaded, replaced
    assert one_run(make).bundles_sent == 0
    assert code.stat().st_uid == st.st_uid and code.stat().st_ino != again.st_ino


def _with_python(lab: harness.SshLab, h: harness.SshHost, python: str) -> Callable[[], Any]:
    opts = SshOptions(python=python, ssh_config=str(lab.ssh_config), connect_timeout=10)
    return lambda: OpenSshTransport(h.name, h.name, None, None, opts)
