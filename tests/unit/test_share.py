"""patcher/transports/share.py: the -F file's text, what may be included, what fits a socket,
and the control directory refused when it is not this user's alone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from patcher.transports import share


def test_config_text_reads_the_operators_config_before_the_sharing() -> None:
    text = share.config_text("/etc/fleet/ssh_config", "/root/.cache/vpatch/cm")
    lines = text.splitlines()
    assert lines[1] == "Include /etc/fleet/ssh_config"
    assert lines[2:] == [
        "Host *",
        "  ControlMaster auto",
        "  ControlPath /root/.cache/vpatch/cm/%C",
        "  ControlPersist 60s",
    ]
    default = share.config_text(None, "/d").splitlines()
    assert default[1:3] == ["Include ~/.ssh/config", "Include /etc/ssh/ssh_config"]


def test_a_control_path_must_fit_a_unix_socket() -> None:
    assert share.fits("/root/.cache/vpatch/cm")
    assert share.fits("/" + "d" * 35)  # 36 + "/" + 40 + "-" + 12 + 17 = 107
    assert not share.fits("/" + "d" * 36)


def test_the_control_path_ends_in_the_trust_digest() -> None:
    text = share.config_text(None, "/d", "0123456789ab")
    assert "  ControlPath /d/%C-0123456789ab" in text.splitlines()


def test_the_trust_digest_changes_with_every_trusted_thing() -> None:
    base = [("strict", "yes"), ("known_hosts", "/k abc"), ("identity", "/i def")]
    digests = {share.trust_digest(base)}
    for i, (what, value) in enumerate(base):
        other = list(base)
        other[i] = (what, value + "x")
        digests.add(share.trust_digest(other))
    assert len(digests) == 4
    assert all(len(d) == share.TRUST_LEN for d in digests)
    assert share.trust_digest(base) == share.trust_digest(list(base))


def test_trust_facts_hash_the_known_hosts_content(tmp_path: Path) -> None:
    from patcher.transports.ssh import SshOptions

    kh = tmp_path / "known_hosts"
    opts = SshOptions(known_hosts=str(kh))
    kh.write_text("[h]:22 ssh-ed25519 AAAA\n")
    first = share.trust_digest(share.trust_facts(opts, "yes", None, None))
    kh.write_text("[h]:22 ssh-ed25519 BBBB\n")
    assert share.trust_digest(share.trust_facts(opts, "yes", None, None)) != first
    strict = share.trust_digest(share.trust_facts(opts, "accept-new", None, None))
    assert strict != share.trust_digest(share.trust_facts(opts, "yes", None, None))


def test_files_an_ssh_config_names_are_trusted_facts(tmp_path: Path) -> None:
    text = (
        "Host *\n  UserKnownHostsFile /a/kh ~/kh2\n  IdentityFile=/id\n"
        "  GlobalKnownHostsFile /dev/null\n  User ops\n"
    )
    home = os.path.expanduser("~")
    assert share.named_files(text) == ["/a/kh", f"{home}/kh2", "/id", "/dev/null"]


ROOT_STICKY = 0o41777  # a directory, sticky, writable by all (/tmp)
DIR = 0o40755
FILE = 0o100600


@pytest.mark.parametrize(
    ("mode", "owner", "last", "want_dir", "why"),
    [
        (DIR, 0, False, True, None),
        (DIR, 500, False, True, None),  # this user's (uid 500 below)
        (ROOT_STICKY, 0, False, True, None),  # /tmp on the way: others cannot rename ours
        (ROOT_STICKY, 0, True, True, "writable by every user"),  # ...but not as the cm dir
        (0o41777, 500, False, True, "writable by every user"),  # sticky only counts for root's
        (0o40775, 0, False, True, "writable by group"),
        (0o40757, 500, False, True, "writable by every user"),
        (DIR, 1001, False, True, "owned by uid 1001"),
        (0o120777, 0, False, True, "is a symbolic link"),
        (FILE, 0, False, True, "not a directory"),
        (FILE, 500, True, False, None),
        (0o100620, 500, True, False, "writable by group"),
        (DIR, 500, True, False, "not a regular file"),
    ],
)
def test_one_path_component(
    mode: int, owner: int, last: bool, want_dir: bool, why: str | None
) -> None:
    st = os.stat_result((mode, 0, 0, 1, owner, 0, 0, 0, 0, 0))
    got = share.component_problem("/p", st, last, 500, want_dir)
    assert (got is None) if why is None else (why in (got or "")), got


def test_a_chain_with_a_dir_others_can_write_is_refused(tmp_path: Path) -> None:
    open_dir = tmp_path / "shared"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # not sticky: anyone may rename what is in it
    (open_dir / "cache").mkdir(mode=0o700)
    assert share.chain_problem(str(tmp_path)) is None
    why = share.chain_problem(str(open_dir / "cache"))
    assert why == f"{open_dir} is writable by every user (mode 777)"


def test_a_link_on_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert share.chain_problem(str(tmp_path / "link")) == f"{tmp_path / 'link'} is a symbolic link"


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/etc/ssh/fleet config", "has ' '"),
        ("/etc/ssh/fleet*", "has '*'"),
        ("/etc/ssh/fl#eet", "has '#'"),
        ("/etc/ssh/100%h", "has '%'"),
        ("fleet.conf", "not an absolute path"),
    ],
)
def test_paths_an_include_line_cannot_carry(path: str, why: str) -> None:
    assert why in (share.include_problem(path) or "")


def test_include_accepts_a_plain_absolute_path() -> None:
    assert share.include_problem("/etc/ssh/fleet.conf") is None


def test_the_control_dir_is_made_0700(tmp_path: Path) -> None:
    d = tmp_path / "cm"
    assert share.owned_dir(str(d), (os.geteuid(), 0)) is None
    assert d.stat().st_mode & 0o777 == 0o700


def test_a_control_dir_open_to_others_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "cm"
    d.mkdir(mode=0o700)
    d.chmod(0o770)
    assert "not this user's alone" in (share.owned_dir(str(d), (os.geteuid(), 0)) or "")


def test_a_link_in_place_of_the_control_dir_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / "cm").symlink_to(real)
    assert "not a directory of ours" in (share.owned_dir(str(tmp_path / "cm"), (0,)) or "")


def test_a_control_dir_another_user_owns_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("the suite runs as root (it starts sshd hosts): chown needs it")
    d = tmp_path / "cm"
    d.mkdir(mode=0o700)
    os.chown(d, 12345, 12345)
    assert "not this user's alone" in (share.owned_dir(str(d), (0,)) or "")


def test_the_config_file_is_written_once_by_its_content(tmp_path: Path) -> None:
    first = share.write_config(str(tmp_path), "Host *\n")
    ino = os.stat(first).st_ino
    assert share.write_config(str(tmp_path), "Host *\n") == first
    assert os.stat(first).st_ino == ino
    assert Path(first).read_text() == "Host *\n"
    assert share.write_config(str(tmp_path), "Host x\n") != first


def test_old_config_files_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = [share.write_config(str(tmp_path), f"Host h{i}\n") for i in range(5)]
    for i, path in enumerate(made):  # written in order: the mtimes say so
        os.utime(path, ns=(i * 10**9, i * 10**9))
    monkeypatch.setattr(share, "KEEP_CONFIGS", 3)
    share.write_config(str(tmp_path), "Host h5\n")
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert len(kept) == 3
    assert Path(made[0]).name not in kept and Path(made[4]).name in kept


def test_config_files_used_lately_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run started within PRUNE_AFTER may still hand its file to ssh: never pruned."""
    monkeypatch.setattr(share, "KEEP_CONFIGS", 2)
    for i in range(4):
        share.write_config(str(tmp_path), f"Host h{i}\n")
    assert len(list(tmp_path.iterdir())) == 4


def test_every_ssh_start_checks_the_path_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ssh re-opens the -F file by name at every start: a directory on its way that became
    writable by others after the run began (a rename there could swap the file) is refused
    at the next start, not only at the first."""
    import tempfile

    from patcher.errors import HostError
    from patcher.transports.openssh import OpenSshTransport
    from patcher.transports.ssh import SshOptions

    base = Path(tempfile.mkdtemp(prefix="vp-", dir="/tmp"))  # short: a socket's path fits
    monkeypatch.setenv("VPATCH_CACHE_DIR", str(base / "cache"))
    cfg = tmp_path / "ssh_config"
    cfg.write_text("")
    cfg.chmod(0o600)
    t = OpenSshTransport("h", "h", None, None, SshOptions(ssh_config=str(cfg)))
    try:
        assert t.share_config == f"{base}/cache/cm/{Path(t.share_config).name}"
        assert t._argv()[0].endswith("ssh")
        base.chmod(0o777)
        with pytest.raises(HostError) as got:
            t._argv()
        assert f"{base} is writable by every user (mode 777); refused" in got.value.message
        assert got.value.hint == share.REFUSED_HINT
    finally:
        shutil.rmtree(base)
