"""transports.sshconfig without a network: OpenSSH's host name rules, known_hosts patterns and
markers (the lab tests in tests/integration/test_ssh_config.py connect for real)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko
import pytest

from patcher.transports import sshconfig


@pytest.mark.parametrize(
    "host", ["gpu-01", "10.0.0.5", "fd00::1", "gpu_01.dc-2.example.com", "h" * 253, "gpu01@x"]
)
def test_names_ssh_accepts(host: str) -> None:
    assert sshconfig.host_problem(host) is None


@pytest.mark.parametrize(
    ("host", "words"),
    [
        ("", "is empty"),
        ("h" * 254, "at most 253"),
        ("-oProxyCommand=x", "starts with '-'"),
        ("a b", "' '"),
        ("a\tb", "\\\\t"),
        ("a\x1bb", "\\\\x1b"),
        *((f"a{c}b", "contains") for c in "'`\"$\\;&<>|(){},"),
    ],
)
def test_names_ssh_refuses(host: str, words: str) -> None:
    problem = sshconfig.host_problem(host)
    assert problem is not None and words in problem, problem


def test_users() -> None:
    assert sshconfig.user_problem("ops.team-1") is None
    assert sshconfig.user_problem("-l") and sshconfig.user_problem("a;b")
    assert sshconfig.user_problem("a b") and sshconfig.user_problem("a$b")


def test_known_hosts_markers_hashed_names_and_bad_lines(tmp_path: Path) -> None:
    keyfile = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keyfile)], check=True)
    kind, blob = keyfile.with_suffix(".pub").read_text().split()[:2]
    key = paramiko.Ed25519Key(filename=str(keyfile))
    hashed = paramiko.HostKeys.hash_host("[10.0.0.7]:2222")
    user = tmp_path / "known_hosts"
    user.write_text(
        "# comment\n\n"
        f"{hashed} {kind} {blob}\n"
        f"@revoked revoked.example.com {kind} {blob}x\n"
        f"@cert-authority *.example.com,!bad.example.com {kind} {blob}\n"
        "garbage line\n"
        f"plain.example.com {kind} not-base64!\n"
    )
    known = sshconfig.load_known_hosts([str(user), str(tmp_path / "absent")], [])
    assert known.user.lookup("[10.0.0.7]:2222") is not None  # the hashed name matches
    assert not known.is_revoked(key) and known.revoked == {blob + "x"}
    assert known.authority_for("gpu.example.com") == str(user)
    assert known.authority_for("[gpu.example.com]:2222") == str(user)
    assert known.authority_for("bad.example.com") is None  # negated
    assert known.authority_for("example.com") is None
    # A revoked key is dropped from the known keys, so paramiko asks the policy about it.
    user.write_text(f"@revoked * {kind} {blob}\n[10.0.0.7]:2222 {kind} {blob}\n")
    known = sshconfig.load_known_hosts([str(user)], [])
    assert known.is_revoked(key) and known.user.lookup("[10.0.0.7]:2222") is None


def test_brackets_in_patterns_are_literal() -> None:
    assert sshconfig._matches("[127.0.0.1]:2222", ("[127.0.0.1]:2222",))
    assert not sshconfig._matches("[127.0.0.1]:2222", ("1",))
    assert sshconfig._matches("10.0.0.?", ("10.0.0.7",))
