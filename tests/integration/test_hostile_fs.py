"""The environment's owner attacks root's vpatch through the package tree itself (issue 24:
descriptor discipline). Each test is one attack that worked by path on the old agent: a
`__pycache__` link, a package dir swapped between a repair's check and its write, a temp
file swapped before its chmod, package files linked to (or RECORD lines climbing `..` to)
root-only files, FIFOs and devices where files should be, an agent left running after its
caller gave up, a state dir reached through the owner's link. Races are driven through the
agent's fault points (the agent parks itself there, the owner moves, the agent goes on), not by
timing luck. Root's own directory must come out untouched every time.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from patcher.transports.bundle import BOOT, agent_bundle
from tests import sshd as harness
from tests import standin
from tests.conftest import Run
from tests.support import fsattack
from tests.support.badinputs import tree_hash
from tests.support.fsattack import NOBODY, SECRET, Host, cli, sha
from tests.support.specs import edit, spec_toml
from tests.support.sshargs import ssh_args
from tests.support.standin_specs import SPEC_A

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root is the operator here")

TAG = sys.implementation.cache_tag

SPEC_ADD = spec_toml(
    id="servekit-aux",
    summary="add a module",
    package="servekit",
    versions=">=1.0",
    file="servekit/aux.py",
    edits=[edit("add_file", text="AUX = 1\n")],
)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = standin.make_env(tmp_path_factory.mktemp("hostile-fs") / "host")
    return python.parent.parent


@pytest.fixture
def host(template: Path) -> Iterator[Host]:
    h = fsattack.make_host(template)
    try:
        yield h
    finally:
        import shutil

        shutil.rmtree(h.base)


def spec(h: Host, text: str = SPEC_A, name: str = "a.toml") -> Path:
    p = h.base / name
    p.write_text(text)
    return p


def no_traceback(res: object) -> None:
    out = getattr(res, "out", "") + getattr(res, "err", "")
    assert "Traceback" not in out, out[-3000:]


# ---------------------------------------------------------------------------------------------
# __pycache__ linked to a root-owned directory


def _pycache_to_victim(h: Host, victim_name: str | Path) -> None:
    """`rm -r pkg/__pycache__; ln -s VICTIM pkg/__pycache__`, with root's bytecode of the
    same names in VICTIM (what a stdlib __pycache__ holds)."""
    for name in (f"config.{TAG}.pyc", f"config.{TAG}.opt-1.pyc"):
        p = h.victim / name
        p.write_bytes(b"root's bytecode")
        os.chmod(p, 0o644)
    h.owner("rm", "-rf", h.pkg / "__pycache__")
    h.owner("ln", "-s", victim_name, h.pkg / "__pycache__")


def test_pycache_link_to_a_root_dir_is_never_written(host: Host) -> None:
    """Old: refresh_bytecode replaced root's .pyc through the link and chowned it to the owner,
    and deleted root's .opt-1.pyc. Now the apply succeeds, with a note, and the link's target
    is untouched."""
    _pycache_to_victim(host, host.victim)
    before = tree_hash(host.victim)
    res = cli("apply", spec(host), "--python", host.python, "--level", "static", "--json")
    no_traceback(res)
    assert res.code == 0, res.out + res.err
    assert b"kimi_k2" in host.target.read_bytes()
    assert tree_hash(host.victim) == before
    assert (host.pkg / "__pycache__").is_symlink()  # left as the owner made it
    back = cli("rollback", "--python", host.python)
    assert back.code == 0, back.out + back.err
    assert tree_hash(host.victim) == before


def test_pycache_link_over_ssh(tmp_path: Path, ssh_lab_factory: harness.LabFactory) -> None:
    """The same attack on a real sshd host (its /root is the lab's), the operator root."""

    def factory(h: harness.SshHost) -> None:
        harness.standin_env_factory(h)
        env = h.home / "ml-env"
        for p in [env, *env.rglob("*")]:
            os.lchown(p, NOBODY, NOBODY)
        victim = h.home / "victim"
        victim.mkdir(mode=0o700)
        (victim / f"config.{TAG}.pyc").write_bytes(b"root's bytecode")
        pkg = next(env.glob("lib/python*/site-packages/servekit"))
        subprocess.run(["rm", "-rf", str(pkg / "__pycache__")], check=True)
        os.symlink("/root/victim", pkg / "__pycache__")  # as the host sees its /root
        os.lchown(pkg / "__pycache__", NOBODY, NOBODY)

    lab = ssh_lab_factory(1, factory)
    h = lab.hosts[0]
    os.chmod(h.home, 0o755)  # the owner does the work (agent/privsep.py): it must reach its env
    before = tree_hash(h.home / "victim")
    p = tmp_path / "a.toml"
    p.write_text(SPEC_A)
    res = cli("apply", p, "--host", h.name, *ssh_args(lab, "--level", "static", "--json"))
    no_traceback(res)
    assert res.code == 0, res.out + res.err
    assert tree_hash(h.home / "victim") == before
    site = next((h.home / "ml-env").glob("lib/python*/site-packages"))
    assert b"kimi_k2" in (site / "servekit" / "config.py").read_bytes()


# ---------------------------------------------------------------------------------------------
# Races, driven through fault points


def _half_written_txn(h: Host) -> bytes:
    """A two-file transaction without its marker, of which the first file's rename happened:
    the repair puts that file back to its before-bytes (the owner's payload, in backups/).
    Returns the payload."""
    payload = b"owned = True\n"
    a, b = h.pkg / "a_mod.py", h.pkg / "b_mod.py"
    h.owner_write(a, "after = 1\n")
    state = h.env / ".vpatch"
    h.owner("mkdir", "-p", "-m700", state / "backups")
    h.owner_write(state / "backups" / sha(payload), payload.decode())
    entries = [
        {"action": "apply", "txn": "t1", "spec": "x", "path": str(a), "package": "servekit"}
        | {"file": "servekit/a_mod.py", "before": sha(payload), "after": sha(a.read_bytes())},
        {"action": "apply", "txn": "t1", "spec": "x", "path": str(b), "package": "servekit"}
        | {"file": "servekit/b_mod.py", "before": None, "after": "1" * 64},
    ]
    h.owner_write(state / "journal.jsonl", "".join(json.dumps(e) + "\n" for e in entries))
    return payload


def _raced(args: tuple[str | Path, ...], fault: dict[str, str], move: Callable[[], None]) -> Run:
    """Run the CLI with a fault point armed to park its agent; make the owner's `move` while
    it is parked; resume it; the CLI's result."""
    proc = fsattack.start_cli(*args, env=fault)
    try:
        agent = fsattack.parked_agent(proc.pid)
        move()
        os.kill(agent, signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Run(proc.returncode, out, err)


def test_repair_check_then_write_race_cannot_write_through_a_swapped_dir(host: Host) -> None:
    """Old: _repair confined and hashed the journal's paths, then wrote by path; the owner
    swapped the package dir for a link to root's dir in between (here: while the agent is
    parked at `repair.checked`) and root wrote the owner's bytes there."""
    payload = _half_written_txn(host)
    before = tree_hash(host.victim)
    fault = {"VPATCH_AGENT_FAULT": "repair.checked:pause"}

    def move() -> None:
        host.owner("mv", host.pkg, host.site / "servekit.moved")
        host.owner("ln", "-s", host.victim, host.pkg)

    res = _raced(("status", "--python", host.python, "--json"), fault, move)
    out, err = res.out, res.err
    assert "Traceback" not in err, err
    assert tree_hash(host.victim) == before, "root wrote through the swapped directory"
    assert not (host.victim / "a_mod.py").exists()
    assert "symlink" in out + err, out + err
    assert payload not in (host.site / "servekit.moved" / "a_mod.py").read_bytes()


def test_temp_file_swapped_before_its_chmod_chmods_nothing_else(host: Host) -> None:
    """Old: a new module's temp file was chmod'ed 0644 by name after the write; the owner
    swapped the name for a link to root's 0600 file, and root made that file 0644. Now the
    mode is set on the descriptor, and the swapped temp file is refused at the rename."""
    before = tree_hash(host.victim)
    fault = {"VPATCH_TEST_FAULT": "write.temp_written:pause"}
    args = ("apply", spec(host, SPEC_ADD, "add.toml"), "--python", host.python, "--level", "static")

    def move() -> None:
        temps = [p for p in host.pkg.iterdir() if p.name.startswith(".vpatch-")]
        assert len(temps) == 1, temps
        host.owner("rm", "-f", temps[0])
        host.owner("ln", "-s", host.secret, temps[0])

    res = _raced(args, fault, move)
    out, err = res.out, res.err
    assert "Traceback" not in err, err
    assert os.stat(host.secret).st_mode & 0o777 == 0o600
    assert tree_hash(host.victim) == before
    assert res.code == 1 and "replaced" in out + err, out + err
    assert not (host.pkg / "aux.py").is_symlink()


# ---------------------------------------------------------------------------------------------
# Reads: links, `..` and special files must not reach the controller or hang the agent


def test_diff_never_ships_a_root_only_file(host: Host) -> None:
    """Old: `vpatch diff` hashed and sent the text of a package file linked to root's file,
    and of a RECORD line `servekit/../../..../secret`, as `modified` files."""
    link = host.pkg / "linked.py"
    host.owner("ln", "-s", host.secret, link)
    host.owner_record_line("servekit/linked.py", b"pristine\n")
    climb = "servekit/" + "../" * 20 + str(host.secret).lstrip("/")
    host.owner_record_line(climb, b"pristine\n")
    host.owner("rm", host.target)
    host.owner("ln", "-s", host.secret, host.target)  # a RECORD file replaced by a link
    leaks = (SECRET.strip(), sha(SECRET.encode()))  # its text, or its hash
    (answer,) = fsattack.agent(host.python, {"op": "scan", "package": "servekit"})
    assert answer["ok"], answer
    assert not any(x in json.dumps(answer) for x in leaks), answer
    for command in (["diff", "servekit"], ["diff", "servekit", "--json"]):
        res = cli(*command, "--python", host.python)
        no_traceback(res)
        assert not any(x in res.out + res.err for x in leaks), res.out + res.err
    res = cli("diff", "servekit", "--python", host.python, "--json")
    assert "servekit/linked.py" in res.out, res.out  # named as not read, not silently dropped
    cap = cli("capture", "servekit", "--id", "evil", "--python", host.python, "--no-matrix")
    no_traceback(cap)
    assert not any(x in cap.out + cap.err for x in leaks), cap.out + cap.err


def test_fifo_and_device_in_record_do_not_hang_the_agent(host: Host) -> None:
    """Old: a FIFO listed in RECORD blocked `diff` forever (open() waits for a writer), and a
    RECORD line climbing to /dev/zero read until memory ran out."""
    host.owner("mkfifo", host.pkg / "fifo.py")
    host.owner_record_line("servekit/fifo.py", b"x\n")
    host.owner_record_line("servekit/" + "../" * 20 + "dev/zero", b"x\n")
    host.owner("ln", "-s", "/dev/zero", host.pkg / "zero.py")
    host.owner_record_line("servekit/zero.py", b"x\n")
    started = time.monotonic()
    res = cli("diff", "servekit", "--python", host.python, "--json", timeout=60)
    no_traceback(res)
    assert res.code in (0, 1), res.out + res.err
    assert "servekit/fifo.py" in res.out and "servekit/zero.py" in res.out, res.out
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("name", ["METADATA", "RECORD"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_hostile_dist_info_files_do_not_hang_inspect(host: Host, name: str, kind: str) -> None:
    """Old: a METADATA or RECORD that is a FIFO hung every command's inspect; one linked to
    /dev/zero ran the agent out of memory."""
    f = host.record.parent / name
    host.owner("rm", f)
    if kind == "fifo":
        host.owner("mkfifo", f)
    else:
        host.owner("ln", "-s", "/dev/zero", f)
    res = cli("status", "--python", host.python, "--json", timeout=60)
    no_traceback(res)
    res = cli("apply", spec(host), "--python", host.python, "--level", "static", timeout=60)
    no_traceback(res)
    assert res.code != 0  # the package's metadata is refused: nothing to patch
    assert b"kimi_k2" not in host.target.read_bytes()


# ---------------------------------------------------------------------------------------------
# An agent whose caller gave up


def test_agent_ends_when_its_caller_goes_away_mid_request(tmp_path: Path, host: Host) -> None:
    """Old: an agent waiting for the lock kept waiting (up to its lock_timeout) after the
    controller closed the connection, and would then have taken the lock and written. Now it
    ends within a moment of its stdout's reader going away, without touching the state."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    holder = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        proc = subprocess.Popen(
            [str(host.python), "-I", "-c", BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdin is not None and proc.stdout is not None
        req = {"op": "commit", "writes": [], "state_dir": str(state), "lock_timeout": 600}
        proc.stdin.write(agent_bundle() + json.dumps(req).encode() + b"\n")
        proc.stdin.flush()
        time.sleep(1.0)  # the agent is now waiting for the lock
        assert proc.poll() is None
        proc.stdin.close()
        proc.stdout.close()
        try:
            assert proc.wait(timeout=10) == 3
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("the agent kept running after its caller went away") from None
    finally:
        os.close(holder)
    assert sorted(p.name for p in state.iterdir()) == ["backups", "lock"]  # no journal


# ---------------------------------------------------------------------------------------------
# --state-dir through the owner's link


def test_state_dir_under_the_owners_link_is_refused(host: Host) -> None:
    """Old: `--state-dir ~owner/link/state` with link -> root's dir created `state` in root's
    dir and chowned it to the owner. Now the work is the owner's (agent/privsep.py): the walk
    follows the owner's own link, and the owner may not enter root's dir."""
    home = host.base / "owner-home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    host.owner("ln", "-s", host.victim, home / "link")
    before = tree_hash(host.victim)
    res = cli(
        "apply", spec(host), "--python", host.python, "--level", "static",
        "--state-dir", home / "link" / "state",
    )  # fmt: skip
    no_traceback(res)
    assert res.code == 1, res.out + res.err
    assert f"Permission denied ({host.victim})" in res.err, res.err
    assert tree_hash(host.victim) == before
    assert b"kimi_k2" not in host.target.read_bytes()


def test_state_dir_through_roots_own_link_still_works(host: Host) -> None:
    """The operator's own links (root-owned) are followed, as any path tool follows them, to a
    state dir the environment's owner may write (the owner does the work: agent/privsep.py)."""
    real = host.base / "real"
    real.mkdir(mode=0o700)
    os.chown(real, NOBODY, NOBODY)
    os.symlink(real, host.base / "rootlink")
    res = cli(
        "apply", spec(host), "--python", host.python, "--level", "static",
        "--state-dir", host.base / "rootlink" / "a" / "state",
    )  # fmt: skip
    assert res.code == 0, res.out + res.err
    assert (real / "a" / "state" / "journal.jsonl").is_file()
