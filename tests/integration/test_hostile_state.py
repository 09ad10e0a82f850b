"""State on the host that cannot be turned against the host: root (the operator, as --sudo
does) patches an environment `nobody` owns, and `nobody` has prepared its `.vpatch/` to make
root write, read, chown or hang somewhere it should not.

Each attack is made by the real owner (commands run as `nobody`, or files it owns), against a
real venv, with the real CLI as root. Root's own directory (`victim`) must come out untouched:
every entry's bytes, mode, owner and mtime (tests/integration/test_bad_inputs.tree_hash).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import envs, standin
from tests.conftest import REPO, VPATCH, Run, vpatch
from tests.support import fsattack
from tests.support.badinputs import tree_hash
from tests.support.fsattack import cli, parked_agent
from tests.support.owners import evil_apply
from tests.support.standin_specs import REL, SPEC_A

NOBODY = 65534
DAEMON = 1  # a third user: neither root nor the env's owner

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root is the operator here")


@dataclass
class Host:
    base: Path  # world-traversable, root-owned
    env: Path  # the venv, owned by nobody
    victim: Path  # root's own directory (0700) with a secret file

    @property
    def python(self) -> Path:
        return self.env / "bin" / "python"

    @property
    def state(self) -> Path:
        return self.env / ".vpatch"

    @property
    def site(self) -> Path:
        return envs.site_packages(self.env)

    @property
    def target(self) -> Path:
        return self.site / REL

    def owner(self, *argv: str | Path) -> None:
        """Run a command as the env's owner."""
        subprocess.run([str(a) for a in argv], user=NOBODY, group=NOBODY, check=True)

    def vpatch(self, *args: str | Path) -> Run:
        return vpatch(*args, "--python", self.python)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = standin.make_env(tmp_path_factory.mktemp("hostile-state") / "host")
    return python.parent.parent


@pytest.fixture
def host(template: Path) -> Iterator[Host]:
    made = fsattack.make_host(template)  # the env nobody's, root's victim dir next to it
    try:
        yield Host(made.base, made.env, made.victim)
    finally:
        shutil.rmtree(made.base)


def spec(h: Host) -> Path:
    p = h.base / "a.toml"
    if not p.exists():
        p.write_text(SPEC_A)
    return p


def refused(res: Run, path: Path | str, what: str) -> None:
    assert res.code == 1, res.out + res.err
    assert "Traceback" not in res.err
    assert str(path) in res.err and what in res.err, res.err


def test_symlinked_backups_dir_is_refused(host: Host) -> None:
    """`ln -s /root-owned/dir ENV/.vpatch/backups`: root's apply chowned that dir's entries to
    the owner and wrote the backup into it."""
    before = tree_hash(host.victim)
    host.owner("mkdir", "-m700", host.state)
    host.owner("ln", "-s", host.victim, host.state / "backups")
    pristine = host.target.read_bytes()
    res = host.vpatch("apply", spec(host), "--level", "static")
    refused(res, host.state / "backups", "is a symlink")
    assert tree_hash(host.victim) == before
    assert host.target.read_bytes() == pristine


@pytest.mark.parametrize("name", ["journal.jsonl", "lock"])
def test_symlinked_journal_or_lock_is_refused(host: Host, name: str) -> None:
    """A journal linked to root's file got the commit's lines appended; a lock linked to a
    name in root's directory created that file there."""
    before = tree_hash(host.victim)
    host.owner("mkdir", "-m700", host.state)
    link = host.victim / ("secret" if name == "journal.jsonl" else "created-by-root")
    host.owner("ln", "-s", link, host.state / name)
    for command in (["apply", spec(host), "--level", "static"], ["status"]):
        res = host.vpatch(*command)
        refused(res, host.state / name, "is a symlink")
    assert tree_hash(host.victim) == before


def test_symlinked_state_dir_is_refused(host: Host) -> None:
    before = tree_hash(host.victim)
    host.owner("ln", "-s", host.victim, host.state)
    res = host.vpatch("apply", spec(host), "--level", "static")
    refused(res, host.state, "is a symlink")
    assert tree_hash(host.victim) == before


def test_state_dir_of_a_third_user_is_refused(host: Host) -> None:
    """Neither root's, nor the user's vpatch runs as, nor (as root) the env owner's."""
    host.state.mkdir(mode=0o700)
    os.chown(host.state, DAEMON, DAEMON)
    res = host.vpatch("apply", spec(host), "--level", "static")
    refused(res, host.state, "owned by uid 1")
    assert list(host.state.iterdir()) == []


def test_hard_linked_journal_is_refused(host: Host) -> None:
    """A journal that is a hard link to root's file (the owner can make one where
    fs.protected_hardlinks is 0; root makes it here) would be appended to."""
    before = tree_hash(host.victim, dir_mtime=False)
    host.owner("mkdir", "-m700", host.state)
    os.link(host.victim / "secret", host.state / "journal.jsonl")
    res = host.vpatch("apply", spec(host), "--level", "static")
    refused(res, host.state / "journal.jsonl", "hard links")
    assert tree_hash(host.victim, dir_mtime=False) == before


def test_adopt_still_gives_the_owner_its_state(host: Host) -> None:
    """Adoption by descriptor (only what the run made) still leaves a sudo run's state the
    env owner's, so the owner's next run without sudo works (regression guard)."""
    ok = host.vpatch("apply", spec(host), "--level", "static")
    assert ok.code == 0, ok.out + ok.err
    owners = {(p.lstat().st_uid, p.name) for p in [host.state, *host.state.rglob("*")]}
    assert {uid for uid, _ in owners} == {NOBODY}, owners


@pytest.mark.parametrize("umask", [0o000, 0o777])
def test_state_dir_parents_vpatch_creates_are_private(host: Host, umask: int) -> None:
    """--state-dir a/b/c: os.makedirs made a and a/b 0777 & ~umask (0777 under umask 000).
    (Made by the env's owner, which root works as: under a directory the owner has.)"""
    owned = host.base / "owned"
    owned.mkdir()
    os.chown(owned, NOBODY, NOBODY)
    state = owned / "a" / "b" / "c"
    py = str(host.python)
    proc = subprocess.run(
        [*VPATCH, "apply", str(spec(host)), "--python", py, "--state-dir", str(state)],
        cwd=REPO,
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.umask(umask),  # the runner is single-threaded
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for d in (owned / "a", owned / "a" / "b", state, state / "backups"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


# ---------------------------------------------------------------------------------------------
# Journaled paths: confined to the env's site-packages, regular files, bounded reads


def journal_lines(h: Host, *entries: dict[str, object]) -> None:
    """The owner writes these entries (committed) to its env's journal."""
    h.owner("mkdir", "-p", "-m700", h.state / "backups")
    lines = [json.dumps({"txn": "t1", **e}) for e in entries]
    lines.append(json.dumps({"action": "commit", "txn": "t1"}))
    tmp = h.base / "journal.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.chown(tmp, NOBODY, NOBODY)
    h.owner("cp", tmp, h.state / "journal.jsonl")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_rollback_never_writes_outside_site_packages(host: Host) -> None:
    """An `apply` entry naming root's file, with a backup the owner wrote: rollback wrote the
    backup's bytes over root's file."""
    payload = b"owned = True\n"
    secret = host.victim / "secret"
    host.owner("mkdir", "-p", "-m700", host.state / "backups")
    tmp = host.base / "payload"
    tmp.write_bytes(payload)
    os.chown(tmp, NOBODY, NOBODY)
    host.owner("cp", tmp, host.state / "backups" / sha(payload))
    journal_lines(host, evil_apply(secret, sha(payload), sha(secret.read_bytes())))
    before = tree_hash(host.victim)
    res = host.vpatch("rollback", "--json")
    assert tree_hash(host.victim) == before
    assert res.code == 0, res.out + res.err
    st = host.vpatch("status", "--json")
    warnings = st.doc["hosts"][0].get("warnings") or st.err
    assert str(secret) in str(warnings) and "outside" in str(warnings), st.out + st.err


def test_journaled_fifo_does_not_hang_status(host: Host) -> None:
    fifo = host.site / "servekit" / "evil_fifo"
    host.owner("mkfifo", fifo)
    journal_lines(host, evil_apply(fifo, "0" * 64, "1" * 64))
    res = cli("status", "--python", host.python, "--json", timeout=60)
    assert res.code in (0, 1) and "Traceback" not in res.err, res.out + res.err
    assert "not a regular file" in res.out + res.err


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a failing run stays small


def test_journaled_dev_zero_is_not_read(host: Host) -> None:
    """`/dev/zero` (outside site-packages) and a 64 MiB sparse file inside it: neither is read
    whole (the first ran the agent out of memory)."""
    big = host.site / "servekit" / "big.py"
    host.owner("truncate", "-s", "64M", big)
    zero, large = evil_apply("/dev/zero", "0" * 64, "1" * 64), evil_apply(big, "0" * 64, "1" * 64)
    journal_lines(host, zero, large)
    res = cli("status", "--python", host.python, "--json", preexec=_limit_memory)
    out = res.out + res.err
    assert "Traceback" not in out and "MemoryError" not in out, out[-3000:]
    assert "/dev/zero" in out and "larger than" in out, out[-3000:]


def test_malformed_journal_line_costs_only_that_line(host: Host) -> None:
    """`{"action": "apply"}` without a spec (valid JSON, wrong shape) made every command fail
    with a KeyError; now it is skipped with a warning naming its line, and the good entries
    still count."""
    ok = host.vpatch("apply", spec(host), "--level", "static")
    assert ok.code == 0, ok.out + ok.err
    journal = host.state / "journal.jsonl"
    good = journal.read_text()
    bad = [
        {"action": "apply"},
        {"action": "apply", "path": str(host.target), "spec": ["not", "a", "str"]},
        {"action": "rollback", "path": str(host.target), "spec": "x", "after": 42},
        {"action": "commit", "txn": {"a": 1}},
        [1, 2],
        "text",
    ]
    journal.write_text(good + "".join(json.dumps(b) + "\n" for b in bad))
    res = host.vpatch("status", "--json")
    assert res.code == 0, res.out + res.err
    assert [p["outcome"] for p in res.doc["hosts"][0]["patches"]] == ["applied"]
    n = len(good.splitlines())
    for line in range(n + 1, n + len(bad) + 1):
        assert f"journal line {line}" in res.out, res.out
    assert host.vpatch("rollback").code == 0


def test_tampered_backup_is_never_replayed(host: Host, tmp_path: Path) -> None:
    """Partial rollback re-applies the kept spec on the backup's text: a backup the owner
    rewrote must be refused as corrupt (full rollback already was)."""
    from tests.support.standin_specs import SPEC_B

    spec_b = host.base / "b.toml"
    spec_b.write_text(SPEC_B)
    backup = host.state / "backups" / sha(host.target.read_bytes())  # of the pristine file
    assert host.vpatch("apply", spec(host), "--level", "static").code == 0
    assert host.vpatch("apply", spec_b, "--level", "static").code == 0
    patched = host.target.read_bytes()
    tmp = host.base / "evil"
    tmp.write_text("import os; os.system('touch /tmp/pwned-by-backup')\n")
    os.chown(tmp, NOBODY, NOBODY)
    host.owner("cp", tmp, backup)
    res = host.vpatch("rollback", spec(host), "--json")
    assert res.code == 1, res.out + res.err
    assert "corrupt" in res.out, res.out
    assert host.target.read_bytes() == patched


def test_package_dir_swapped_for_a_link_at_commit_is_refused(host: Host) -> None:
    """Inspect saw a real package dir; before the commit writes, the owner replaces it with a
    link to a copy elsewhere. The commit re-checks the path under its lock and refuses."""
    outside = host.base / "outside"  # somewhere the owner can write (its home, /tmp...)
    outside.mkdir()
    os.chown(outside, NOBODY, NOBODY)
    res_box: dict[str, Run] = {}
    env = {"VPATCH_TEST_FAULT": "commit.locked:pause"}
    proc = subprocess.Popen(
        [*VPATCH, "apply", str(spec(host)), "--python", str(host.python), "--level", "static"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    agent = parked_agent(proc.pid)
    pkg = host.site / "servekit"
    host.owner("mv", pkg, outside / "servekit")
    host.owner("ln", "-s", outside / "servekit", pkg)
    before = tree_hash(outside)
    os.kill(agent, signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    res_box["r"] = Run(proc.returncode, out, err)
    assert tree_hash(outside) == before, "the commit wrote through the link"
    res = res_box["r"]
    assert res.code == 1 and "symlink" in res.err, res.out + res.err
